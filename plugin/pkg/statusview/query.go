package statusview

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// Query makes up the query of q, for explain: its question, its client subnet option, and a
// writer whose remote address is the client, to run through the code ServeDNS runs.
func Query(q Question) (*dns.Msg, dns.ResponseWriter) {
	r := new(dns.Msg)
	r.SetQuestion(q.Name, q.Type)
	if q.ECS.IsValid() {
		r.SetEdns0(dns.DefaultMsgSize, false)
		fam := uint16(1)
		if q.ECS.Addr().Is6() {
			fam = 2
		}
		r.IsEdns0().Option = append(r.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: fam,
			SourceNetmask: uint8(q.ECS.Bits()), Address: q.ECS.Masked().Addr().AsSlice()}) //nolint:gosec // Bits is 0..128
	}
	return r, &explainWriter{addr: &net.UDPAddr{IP: q.Client.AsSlice()}}
}

// explainWriter is the writer of a made-up query: it only has a remote address, and nothing is
// ever written to it.
type explainWriter struct {
	dns.ResponseWriter
	addr net.Addr
}

func (w *explainWriter) RemoteAddr() net.Addr { return w.addr }

func (w *explainWriter) LocalAddr() net.Addr { return &net.UDPAddr{} }

func (w *explainWriter) WriteMsg(*dns.Msg) error { return errNoWrite }

func (w *explainWriter) Write([]byte) (int, error) { return 0, errNoWrite }

var errNoWrite = errors.New("explain writes no answer")

// Locate finds the region of the query r from w as ServeDNS does (region.Locator.Locate) and says
// how it was found (L-1, L-2).
func Locate(loc *region.Locator, r *dns.Msg, w dns.ResponseWriter, q Question, public bool) Location {
	id, from := loc.Locate(w.RemoteAddr(), r, public)
	t := loc.Table
	out := Location{Region: t.Name(id), Address: from.Addr.String()}
	var how []string
	switch {
	case from.ECS != nil:
		out.ECS = q.ECS.Masked().String()
		how = append(how, fmt.Sprintf("the EDNS Client Subnet %s (source prefix %d) of a public zone (L-1)", out.ECS, q.ECS.Bits()))
	case q.ECS.IsValid() && !public:
		how = append(how, "the client address: the zone is private, so the client subnet "+q.ECS.String()+" is ignored (L-1)")
	case q.ECS.IsValid():
		how = append(how, "the client address: a client subnet with source prefix 0 says nothing (L-1)")
	default:
		how = append(how, "the client address (no client subnet)")
	}
	if _, p := loc.Subnet(from.Addr); p.IsValid() {
		out.Subnet = p.String()
		how = append(how, fmt.Sprintf("%s is in `subnet %s %s` (L-2)", from.Addr, t.Name(id), p))
	} else if id != region.None {
		how = append(how, fmt.Sprintf("%s is in no configured subnet: the server's own region %s (L-2)", from.Addr, t.Name(id)))
	} else {
		how = append(how, fmt.Sprintf("%s is in no configured subnet and the server has no `region`: no region", from.Addr))
	}
	out.How = strings.Join(how, "; ")
	return out
}
