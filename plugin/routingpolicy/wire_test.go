package routingpolicy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin/pkg/edns"
	"github.com/coredns/coredns/plugin/pkg/nonwriter"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

// wireZone has every shape of answer: plain sets with additional data, a referral with glue and
// DS at the cut, wildcards (plain, CNAME, MX, a policy), DNAMEs (in the zone, out of it, and one
// whose substitution is too long), CNAME chains (to data, out of the zone, to a cut, past file's
// limit of 10), every policy kind with health checks, answers too large for 512 octets, for a
// UDP datagram, and for 4096 octets.
func wireZone() string {
	big, bigTXT, long := make([]string, 0, 60), make([]string, 0, 8), make([]string, 0, 12)
	for i := 1; i <= 60; i++ {
		big = append(big, fmt.Sprintf("192.0.2.%d", i))
	}
	for i := range 8 {
		bigTXT = append(bigTXT, fmt.Sprintf("record bigtxt TXT 60 %q", strings.Repeat(string(rune('a'+i)), 200)))
	}
	for i := range 12 {
		long = append(long, fmt.Sprintf("record c%d CNAME 60 c%d", i, i+1))
	}
	huge := make([]string, 0, 30)
	for i := range 30 {
		huge = append(huge, fmt.Sprintf("record huge TXT 60 \"%02d%s\"", i, strings.Repeat(string(rune('a'+i%26)), 248)))
	}
	long63, m63 := strings.Repeat("l", 63), strings.Repeat("m", 63)
	return `routingpolicy example.org {
		public
		region us-east1
		subnet europe-west2 10.2.0.0/16 2001:db8:2::/48
		record @ A 60 192.0.2.100
		record www A 60 192.0.2.1
		record www A 60 192.0.2.2
		record www AAAA 60 2001:db8::1
		record Mail A 60 192.0.2.3
		record mx MX 60 10 www
		record mx MX 60 20 mail
		record mx MX 60 30 mx.example.net.
		record _sip._tcp.srv SRV 60 10 5 5060 www
		record txt TXT 60 "hello world" "two"
		record alias CNAME 60 www
		record chain CNAME 60 alias
		record out CNAME 60 www.example.net.
		record tonx CNAME 60 nx
		record sub NS 60 ns.sub
		record sub NS 60 ns.example.net.
		record ns.sub A 60 192.0.2.53
		record ns.sub AAAA 60 2001:db8::53
		record sub DS 60 12345 13 2 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
		record www.sub A 60 192.0.2.54
		record tocut CNAME 60 x.sub
		record *.wild A 60 192.0.2.7
		record *.wild TXT 60 "wild"
		record real.wild A 60 192.0.2.8
		record *.cwild CNAME 60 www
		record *.mwild MX 60 10 www
		record dn DNAME 60 wild.example.org.
		record dnx DNAME 60 example.net.
		record ` + long63 + `.` + long63 + `.` + long63 + ` DNAME 60 ` + m63 + `.` + m63 + `.` + m63 + `.example.org.
		record tolong CNAME 60 x.` + long63 + `.` + long63 + `.` + long63 + `
		record ent.deep.a A 60 192.0.2.9
		` + strings.Join(long, "\n\t\t") + `
		record c12 A 60 192.0.2.12
		record mid TXT 60 "` + strings.Repeat("m", 250) + `" "` + strings.Repeat("n", 250) + `" "` + strings.Repeat("o", 250) + `"
		` + strings.Join(bigTXT, "\n\t\t") + `
		` + strings.Join(huge, "\n\t\t") + `
		wrr *.app A 60 "1=10.0.0.3,10.0.0.4;1=10.0.0.5"
		wrr wrr A 60 "1=10.0.0.1,10.0.0.2,10.0.0.6;2=10.0.0.7;0=10.0.0.8" healthcheck web
		wrr wmx MX 60 "1=10 www;1=20 mail"
		wrr wcname CNAME 60 "1=www;1=alias;1=out"
		wrr wtxt TXT 60 "1=\"a\";1=\"b\""
		geo geo A 60 "us-east1=10.0.1.1,10.0.1.2;europe-west2=10.0.2.1;asia-northeast1=10.0.3.1" healthcheck web
		geo geof AAAA 60 "us-east1=2001:db8:1::1;europe-west2=2001:db8:2::1" fence
		failover fo A 60 "10.0.0.1,10.0.0.9" "us-east1=10.0.1.1;europe-west2=10.0.2.1" trickle 0.5 healthcheck web
		failover foc CNAME 60 "www" "us-east1=alias;europe-west2=out"
		wrr big A 60 "1=` + strings.Join(big, ",") + `"
	}`
}

// wireNames are the names wireTest asks, each at itself and one label below.
var wireNames = []string{
	"example.org.", "www", "mail", "mx", "_sip._tcp.srv", "srv", "txt", "alias", "chain", "out", "tonx",
	"sub", "ns.sub", "www.sub", "tocut", "a.wild", "real.wild", "x.y.wild", "a.cwild", "a.mwild",
	"x.dn", "a.x.dn", "dn", "x.dnx", "tolong", "ent.deep.a", "deep.a", "c0", "c3", "x.app", "wrr", "wmx",
	"wcname", "wtxt", "geo", "geof", "fo", "foc", "big", "mid", "bigtxt", "huge", "nx", "x.nx",
}

var wireTypes = []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeMX, dns.TypeTXT, dns.TypeCNAME, dns.TypeNS,
	dns.TypeSOA, dns.TypeDS, dns.TypeSRV, dns.TypeANY, dns.TypeDNAME}

// wireQuery is one way of asking: the EDNS0 of the query, its flags, its client.
type wireQuery struct {
	name   string
	edns   bool
	size   uint16
	do     bool
	z      uint16 // extended flags besides DO (RFC 6891 6.1.4), echoed by CoreDNS
	cookie bool   // a COOKIE option, which CoreDNS does not echo
	ecs    string // a client subnet, CIDR
	rd, cd bool
	opcode int
	client net.Addr
}

func (q wireQuery) msg(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 0xbeef
	m.RecursionDesired, m.CheckingDisabled, m.Opcode = q.rd, q.cd, q.opcode
	if !q.edns {
		return m
	}
	m.SetEdns0(q.size, q.do)
	o := m.IsEdns0()
	o.Hdr.Ttl |= uint32(q.z)
	if q.cookie {
		o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
	}
	if q.ecs != "" {
		ip, n, _ := net.ParseCIDR(q.ecs) // ip as written: the address bits beyond the prefix too
		ones, _ := n.Mask.Size()
		e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: uint8(ones), Address: ip.To4()}
		if ip.To4() == nil {
			e.Family, e.Address = 2, ip
		}
		o.Option = append(o.Option, e)
	}
	return m
}

var (
	udp4   = &net.UDPAddr{IP: net.ParseIP("10.1.1.1"), Port: 40212}
	udp4eu = &net.UDPAddr{IP: net.ParseIP("10.2.3.4"), Port: 40212}
	udp6   = &net.UDPAddr{IP: net.ParseIP("2001:db8:2::7"), Port: 40212}
	tcp4   = &net.TCPAddr{IP: net.ParseIP("10.1.1.1"), Port: 40212}
	tcp6   = &net.TCPAddr{IP: net.ParseIP("2001:db8::7"), Port: 40212}
)

var wireQueries = []wireQuery{
	{name: "plain", client: udp4},
	{name: "rd", rd: true, client: udp4},
	{name: "cd", cd: true, rd: true, client: udp4eu},
	{name: "opcode status", opcode: dns.OpcodeStatus, rd: true, cd: true, client: udp4},
	{name: "edns 512", edns: true, size: 512, client: udp4},
	{name: "edns below 512", edns: true, size: 100, client: udp4},
	{name: "edns 1232 do", edns: true, size: 1232, do: true, client: udp6},
	{name: "edns 4096", edns: true, size: 4096, client: udp4},
	{name: "edns 4096 do ipv6", edns: true, size: 4096, do: true, client: udp6},
	{name: "edns z bits", edns: true, size: 1232, z: 0x7f7f, do: true, client: udp4},
	{name: "edns cookie", edns: true, size: 1232, cookie: true, client: udp4},
	{name: "ecs /24", edns: true, size: 1232, ecs: "10.2.3.0/24", client: udp4},
	{name: "ecs /20 do, host bits set", edns: true, size: 1232, do: true, ecs: "10.2.63.9/20", client: udp4},
	{name: "ecs /32", edns: true, size: 4096, ecs: "203.0.113.9/32", client: udp4eu},
	{name: "ecs v6 /56 cookie", edns: true, size: 1232, ecs: "2001:db8:2:ab00::/56", cookie: true, client: udp4},
	{name: "ecs v6 /127, host bit set", edns: true, size: 1232, ecs: "2001:db8:9::ff/127", client: udp6},
	{name: "tcp", client: tcp4},
	{name: "tcp edns ecs", edns: true, size: 1232, ecs: "10.2.0.0/16", client: tcp6},
}

// mixCase writes some letters of name in upper case, as a resolver using 0x20 asks.
func mixCase(r *rand.Rand, name string) string {
	b := []byte(name)
	for i, c := range b {
		if 'a' <= c && c <= 'z' && r.IntN(2) == 0 {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// TestPackedEqualsWriteMsg: R-ZONE-1, L-1: an answer written as packed bytes (writePacked) is,
// octet for octet, the message CoreDNS sends when routingpolicy writes the dns.Msg with WriteMsg
// (SizeAndDo, the ScrubWriter, dns.Msg.Pack): for every shape of answer in wireZone, asked every
// way in wireQueries (EDNS0 or not, buffer sizes, DO and the other extended flags, RD and CD,
// another opcode, client subnets of both families whose scope geo and failover answers carry,
// UDP and TCP, IPv4 and IPv6, the question in mixed case), with every address healthy, some
// unhealthy, and all unhealthy (fail open). Only answers CoreDNS would truncate or compress go
// through WriteMsg, and the test checks that they are those.
func TestPackedEqualsWriteMsg(t *testing.T) {
	rp, b := newTest(t, wireZone())
	r := rand.New(rand.NewPCG(17, 71))
	packed, fallback := 0, 0
	for _, health := range []struct {
		name      string
		unhealthy []string
	}{
		{"healthy", nil},
		{"some unhealthy", []string{"10.0.0.1", "10.0.0.7", "10.0.1.1"}},
		{"all unhealthy", []string{"10.0.0.1", "10.0.0.2", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9", "10.0.1.1", "10.0.1.2", "10.0.2.1", "10.0.3.1"}},
	} {
		for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9", "10.0.1.1", "10.0.1.2", "10.0.2.1", "10.0.3.1"} {
			set(b, "web", ip, healthyUnless(health.unhealthy, ip))
		}
		for _, rel := range wireNames {
			name := relName(rel, "example.org.")
			for _, qname := range []string{name, "x." + name} {
				for _, qtype := range wireTypes {
					// Every name and type plainly, and three other ways drawn at random.
					qs := []wireQuery{wireQueries[0], wireQueries[1+r.IntN(len(wireQueries)-1)], wireQueries[1+r.IntN(len(wireQueries)-1)], wireQueries[1+r.IntN(len(wireQueries)-1)]}
					for _, q := range qs {
						m := q.msg(mixCase(r, qname), qtype)
						wire, ok := bothWays(t, rp, m, q.client)
						if ok {
							packed++
							continue
						}
						fallback++
						if !truncatedOrCompressed(t, wire) {
							t.Errorf("%s %s asked %s (%s): written with WriteMsg, but CoreDNS neither truncated nor compressed it (%d octets)",
								qname, dns.TypeToString[qtype], q.name, health.name, len(wire))
						}
					}
				}
			}
		}
	}
	t.Logf("%d answers packed, %d through WriteMsg (truncated or compressed)", packed, fallback)
	if fallback == 0 || packed < 10*fallback {
		t.Errorf("%d answers packed, %d through WriteMsg: the table does not exercise both", packed, fallback)
	}
}

func healthyUnless(unhealthy []string, ip string) health.State {
	if slices.Contains(unhealthy, ip) {
		return health.Unhealthy
	}
	return health.Healthy
}

// truncatedOrCompressed reports whether the message wire has TC set or name compression.
func truncatedOrCompressed(t *testing.T, wire []byte) bool {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(wire); err != nil {
		t.Fatalf("%v: %x", err, wire)
	}
	m.Compress = false
	return m.Truncated || m.Len() > len(wire)
}

// TestPackedFallsBack: the answers that are not a copy of packed records go through WriteMsg,
// where CoreDNS truncates (TC, RFC 1035 4.2.1) or compresses them, or echoes EDNS0 options: they
// are the same as before, and the others are packed.
func TestPackedFallsBack(t *testing.T) {
	rp, _ := newTest(t, wireZone())
	for _, tc := range []struct {
		what   string
		q      wireQuery
		qname  string
		qtype  uint16
		packed bool
		tc     bool
	}{
		{"60 addresses to a client without EDNS0: truncated", wireQueries[0], "big.example.org.", dns.TypeA, false, true},
		{"60 addresses (1.9 kB) to a buffer of 4096: compressed", wireQuery{edns: true, size: 4096, client: udp4}, "big.example.org.", dns.TypeA, false, false},
		{"850 octets to a buffer of 1232", wireQuery{edns: true, size: 1232, client: udp6}, "mid.example.org.", dns.TypeTXT, true, false},
		{"850 octets to a client without EDNS0: truncated", wireQuery{client: udp6}, "mid.example.org.", dns.TypeTXT, false, true},
		{"60 addresses over TCP", wireQuery{client: tcp4}, "big.example.org.", dns.TypeA, true, false},
		{"1.6 kB to an IPv4 client with a buffer of 4096: compressed", wireQuery{edns: true, size: 4096, client: udp4}, "bigtxt.example.org.", dns.TypeTXT, false, false},
		{"1.6 kB over TCP", wireQuery{edns: true, size: 4096, client: tcp4}, "bigtxt.example.org.", dns.TypeTXT, true, false},
		{"7.7 kB to a buffer of 4096: truncated", wireQuery{edns: true, size: 4096, client: udp4}, "huge.example.org.", dns.TypeTXT, false, true},
		{"7.7 kB over TCP", wireQuery{client: tcp6}, "huge.example.org.", dns.TypeTXT, true, false},
	} {
		wire, packed := bothWays(t, rp, tc.q.msg(tc.qname, tc.qtype), tc.q.client)
		m := new(dns.Msg)
		if err := m.Unpack(wire); err != nil {
			t.Fatal(err)
		}
		if packed != tc.packed || m.Truncated != tc.tc {
			t.Errorf("%s: packed %v, TC %v; want packed %v, TC %v", tc.what, packed, m.Truncated, tc.packed, tc.tc)
		}
	}

	// An option CoreDNS echoes (a plugin registered it, as rewrite does) is echoed through WriteMsg.
	const code = 65001 // local/experimental use (RFC 6891 9)
	edns.SetSupportedOption(code)
	q := wireQuery{edns: true, size: 1232, client: udp4}.msg("www.example.org.", dns.TypeA)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: code, Data: []byte("x")})
	wire, packed := bothWays(t, rp, q, udp4)
	m := new(dns.Msg)
	if err := m.Unpack(wire); err != nil {
		t.Fatal(err)
	}
	if packed || len(m.IsEdns0().Option) != 1 {
		t.Errorf("a query with an option CoreDNS echoes: packed %v, options %v; want WriteMsg and the option echoed", packed, m.IsEdns0().Option)
	}
}

// TestPackedSizeLimits: an answer is packed up to the size CoreDNS sends as it is, and one octet
// more goes through WriteMsg: the client's buffer (at least 512), 1480 octets over UDP to an IPv4
// client and 1220 to an IPv6 one (above them request.Scrub compresses), 65535 over TCP.
func TestPackedSizeLimits(t *testing.T) {
	for _, tc := range []struct {
		what   string
		q      wireQuery
		limit  int
		packed bool // packed above the limit too: over TCP, nothing up to 65535 is changed
	}{
		{"no EDNS0", wireQuery{client: udp4}, 512, false},
		{"a buffer of 1000", wireQuery{edns: true, size: 1000, client: udp4}, 1000, false},
		{"a buffer of 4096, IPv4", wireQuery{edns: true, size: 4096, client: udp4}, 1480, false},
		{"a buffer of 4096, IPv6", wireQuery{edns: true, size: 4096, client: udp6}, 1220, false},
		{"TCP", wireQuery{client: tcp4}, 1480, true},
	} {
		for _, n := range []int{tc.limit, tc.limit + 1} {
			rp, _ := newTest(t, "routingpolicy example.org {\n"+txtOfSize(t, tc.q, n)+"\n}")
			wire, packed := bothWays(t, rp, tc.q.msg("edge.example.org.", dns.TypeTXT), tc.q.client)
			if n == tc.limit && len(wire) != n {
				t.Fatalf("%s: the answer has %d octets, want %d", tc.what, len(wire), n)
			}
			if want := n == tc.limit || tc.packed; packed != want {
				t.Errorf("%s: an answer of %d octets: packed %v, want %v", tc.what, n, packed, want)
			}
		}
	}
}

// txtOfSize returns a record line for edge.example.org. TXT whose answer to q has n octets.
func txtOfSize(t *testing.T, q wireQuery, n int) string {
	t.Helper()
	// The answer with one empty string (rdata of 1 octet), asked over TCP, where nothing is
	// truncated or compressed, tells the size of the rest.
	rp, _ := newTest(t, "routingpolicy example.org {\nrecord edge TXT 60 \"\"\n}")
	tcp := q
	tcp.client = tcp4
	base, _ := bothWays(t, rp, tcp.msg("edge.example.org.", dns.TypeTXT), tcp4)
	var strs []string
	for rd := n - len(base) + 1; rd > 0; {
		k := min(rd-1, 255) // a character string is a length octet and up to 255 octets
		strs = append(strs, fmt.Sprintf("%q", strings.Repeat("x", k)))
		rd -= k + 1
	}
	return "record edge TXT 60 " + strings.Join(strs, " ")
}

// unwrapper is a writer that passes Write on and says what it wraps, as udpbatch's does.
type unwrapper struct{ dns.ResponseWriter }

func (u unwrapper) Unwrap() dns.ResponseWriter { return u.ResponseWriter }

// opaque is a writer that wraps another without saying so.
type opaque struct{ dns.ResponseWriter }

// TestPackedOnlyToClient: an answer is written as packed bytes only to the writer of the client
// that asked, the server's ScrubWriter, maybe under writers that say what they wrap. A plugin that
// asks the server a question of its own (pkg/upstream for file's CNAME targets, outbound for FQDN
// targets) captures the dns.Msg with a nonwriter around its own client's writer: that answer is
// written with WriteMsg, or the lookup would see nothing and its client would get our bytes.
// Regression: outbound's FQDN target in a geo zone got SERVFAIL.
func TestPackedOnlyToClient(t *testing.T) {
	rp, _ := newTest(t, wireZone())
	q := new(dns.Msg)
	q.SetQuestion("geo.example.org.", dns.TypeA)
	for _, tc := range []struct {
		what   string
		wrap   func(dns.ResponseWriter) dns.ResponseWriter
		packed bool
	}{
		{"the server's writer", func(w dns.ResponseWriter) dns.ResponseWriter { return request.NewScrubWriter(q, w) }, true},
		{"under a writer that unwraps", func(w dns.ResponseWriter) dns.ResponseWriter { return unwrapper{request.NewScrubWriter(q, w)} }, true},
		{"under a writer that does not", func(w dns.ResponseWriter) dns.ResponseWriter { return opaque{request.NewScrubWriter(q, w)} }, false},
		{"not the server's", func(w dns.ResponseWriter) dns.ResponseWriter { return w }, false},
	} {
		client := newServerWriter("10.1.1.1")
		rp.ServeDNS(context.Background(), tc.wrap(client), q.Copy())
		if client.packed != tc.packed || client.answer(t).Rcode != dns.RcodeSuccess {
			t.Errorf("%s: packed %v, want %v", tc.what, client.packed, tc.packed)
		}
	}

	// A lookup of the server's own, as pkg/upstream makes it inside a client's query.
	client := newServerWriter("10.1.1.1")
	nw := nonwriter.New(request.NewScrubWriter(q, client))
	rp.ServeDNS(context.Background(), request.NewScrubWriter(q, nw), q.Copy())
	if client.last != nil || nw.Msg == nil || len(nw.Msg.Answer) != 2 {
		t.Fatalf("a lookup through a nonwriter: the client got %x, the lookup %v", client.last, nw.Msg)
	}
}

// TestPackedBehindPassThrough: issue 17, lever 2: behind the plugins packedPath lets before
// routingpolicy (errors, metadata, healthcheck...), answers are written as packed bytes. Each of
// them hands the next plugin the writer plugin.NextOrFailure wraps around its own (CoreDNS's
// pluginWriter, which passes Write on as it is). Regression: toClient did not see through it,
// so no answer was packed in a server block with any plugin before routingpolicy. A lookup of
// the server's own behind such plugins still gets the dns.Msg.
func TestPackedBehindPassThrough(t *testing.T) {
	rp, _ := newTest(t, wireZone())
	q := new(dns.Msg)
	q.SetQuestion("www.example.org.", dns.TypeA)
	// metadata -> healthcheck -> errors -> routingpolicy, as dnsserver chains them.
	chain := &stub{name: "metadata", next: &stub{name: "healthcheck", next: &stub{name: "errors", next: rp}}}

	client := newServerWriter("10.1.1.1")
	chain.ServeDNS(context.Background(), request.NewScrubWriter(q, client), q.Copy())
	if !client.packed || len(client.answer(t).Answer) != 2 {
		t.Errorf("behind metadata, healthcheck and errors: packed %v, answer %v; want packed bytes", client.packed, client.answer(t))
	}

	client = newServerWriter("10.1.1.1")
	nw := nonwriter.New(request.NewScrubWriter(q, client))
	chain.ServeDNS(context.Background(), request.NewScrubWriter(q, nw), q.Copy())
	if client.last != nil || nw.Msg == nil || len(nw.Msg.Answer) != 2 {
		t.Fatalf("a lookup through a nonwriter behind errors: the client got %x, the lookup %v", client.last, nw.Msg)
	}
}

// TestPackedNotToDoQ: RFC 9250 4.2: a DoQ server ends its answer with the STREAM FIN. CoreDNS's
// DoQWriter sends it in WriteMsg, not in Write, and its server does not close the stream after
// the chain: answers to DoQ clients are written with WriteMsg. Regression: a DoQ client got the
// answer but never the end of the stream. DoH's writer unpacks what Write gives it into a
// dns.Msg, which WriteMsg hands it as it is: DoH answers get WriteMsg too.
func TestPackedNotToDoQ(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion("www.example.org.", dns.TypeA)
	for _, tc := range []struct {
		what string
		w    dns.ResponseWriter
	}{
		{"DoQ", &dnsserver.DoQWriter{}},
		{"DoH", &dnsserver.DoHWriter{}},
	} {
		if toClient(request.NewScrubWriter(q, tc.w)) {
			t.Errorf("%s: answers written as packed bytes, want WriteMsg", tc.what)
		}
	}
	if !toClient(request.NewScrubWriter(q, newServerWriter("10.1.1.1"))) {
		t.Errorf("miekg/dns's writer: answers written with WriteMsg, want packed bytes")
	}
}

// countingWriter is a dns.DecorateWriter's writer that counts what goes through it.
type countingWriter struct {
	dns.Writer
	n *atomic.Int32
}

func (c countingWriter) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Writer.Write(b)
}

// TestPackedThroughDecoratedWriter: issue 17, lever 2: a UDP writer decorator (shed's) sees every
// answer. dnsserver decorates a listener with the decorator of any server block on it, so one in
// another block than routingpolicy's decorates its answers too; miekg/dns's Write passes the
// decorator by, so a decorated writer gets WriteMsg. Regression: with shed in another block on
// the same port, packedPath (routingpolicy's block only) chose Write and answers went past shed.
// An undecorated writer still gets packed bytes.
func TestPackedThroughDecoratedWriter(t *testing.T) {
	rp, _ := newTest(t, wireZone())
	for _, decorate := range []bool{false, true} {
		var writes atomic.Int32
		var packed atomic.Bool
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			packed.Store(toClient(request.NewScrubWriter(r, w)))
			rp.ServeDNS(context.Background(), request.NewScrubWriter(r, w), r)
		})}
		if decorate {
			srv.DecorateWriter = func(w dns.Writer) dns.Writer { return countingWriter{w, &writes} }
		}
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe() //nolint:errcheck // ends with Shutdown
		<-started
		m, err := dns.Exchange(wireQuery{}.msg("www.example.org.", dns.TypeA), pc.LocalAddr().String())
		if err := srv.Shutdown(); err != nil {
			t.Error(err)
		}
		if err != nil || len(m.Answer) != 2 {
			t.Fatalf("decorated %v: %v %v", decorate, m, err)
		}
		if packed.Load() == decorate || decorate && writes.Load() != 1 {
			t.Errorf("decorated %v: packed %v, the decorator saw %d answers", decorate, packed.Load(), writes.Load())
		}
	}
}
