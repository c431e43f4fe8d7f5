package routingpolicy

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"reflect"
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/pkg/edns"
	"github.com/coredns/coredns/plugin/pkg/nonwriter"
	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/udpanswer"

	"github.com/miekg/dns"
)

// packed is records of the zone with their wire form, made when the data loads: the records one
// after the other as dns.Msg.Pack writes them into a message that is not compressed. That is how
// CoreDNS sends every answer that fits the client's buffer and a UDP datagram (request.Scrub
// compresses only the others), and without compression the bytes of a record are the same
// wherever it goes in the message.
type packed struct {
	rrs   []dns.RR // capacity clipped, so a plugin that appends to a section copies
	wire  []byte
	spans []span // for each record, where its owner name and the record end in wire
}

type span struct{ owner, end int }

// pack returns rrs with their wire form.
func pack(rrs []dns.RR) (packed, error) {
	p := packed{rrs: slices.Clip(rrs)}
	if len(rrs) == 0 {
		return p, nil
	}
	p.spans = make([]span, len(rrs))
	for i, rr := range rrs {
		start := len(p.wire)
		var err error
		if p.wire, err = appendRR(p.wire, rr); err != nil {
			return packed{}, fmt.Errorf("record %q cannot be written in a message: %v", rr.String(), err)
		}
		p.spans[i] = span{owner: nameEnd(p.wire, start), end: len(p.wire)}
	}
	p.wire = slices.Clip(p.wire)
	return p, nil
}

// nameEnd returns where the uncompressed name at b[off:] ends.
func nameEnd(b []byte, off int) int {
	for b[off] != 0 {
		off += int(b[off]) + 1
	}
	return off + 1
}

// appendRR appends rr packed without compression, as dns.Msg.Pack writes it.
func appendRR(b []byte, rr dns.RR) ([]byte, error) {
	off := len(b)
	b = slices.Grow(b, dns.Len(rr))
	end, err := dns.PackRR(rr, b[:cap(b)], off, nil, false)
	if err != nil {
		return b[:off], err
	}
	return b[:end], nil
}

// appendName appends name packed without compression.
func appendName(b []byte, name string) ([]byte, bool) {
	off := len(b)
	b = slices.Grow(b, maxNameLen+1)
	end, err := dns.PackDomainName(name, b[:cap(b)], off, nil, false)
	if err != nil {
		return b[:off], false
	}
	return b[:end], true
}

// writePacked writes rep, the answer to r, to w as bytes copied from the packed records, packed
// into buf: the message CoreDNS would send for rep.msg(r) with the ECS scope of ecs (ServeDNS),
// after request.SizeAndDo and the ScrubWriter every query's writer is wrapped in (SizeAndDo,
// Truncate, Scrub), then dns.Msg.Pack, byte for byte. It writes nothing and returns false when
// that message is not a copy: one CoreDNS would truncate or compress (too large for the client's
// buffer or for a UDP datagram), one with EDNS0 options CoreDNS echoes (none, unless rewrite
// registered some), one that does not pack; and when w does not write to the client (toClient). It returns buf, maybe grown, for the next answer:
// ResponseWriter.Write does not keep the slice it is given (io.Writer's contract: miekg/dns
// writes it to the socket, a writer that queues copies it).
func writePacked(w dns.ResponseWriter, r *dns.Msg, rep *reply, ecs *dns.EDNS0_SUBNET, buf []byte, d *udpanswer.Direct) ([]byte, bool) {
	sw := clientWriter(w)
	if sw == nil {
		return buf, false
	}
	b, ok := appendReply(buf[:0], r, rep, ecs)
	if ok && len(b) > dns.MinMsgSize {
		ok = fits(w, r, len(b))
	}
	if ok {
		write(w, sw, d, b)
	}
	return b, ok
}

// write writes b to w, whose ScrubWriter is sw. When the writer beneath sw is miekg/dns's UDP
// writer, d (udpanswer.Direct) takes its place for this Write: it sends b with the same system
// call to the same client from the same address, with the reply's control message made once per
// received control message (local address and interface) rather than parsed and made again for
// every answer (miekg/dns's correctSource: about 0.5 µs and seven allocations). The wrappers above
// sw see the Write as before.
func write(w dns.ResponseWriter, sw *request.ScrubWriter, d *udpanswer.Direct, b []byte) {
	rw := sw.ResponseWriter
	if d == nil || !d.Reset(rw) {
		w.Write(b)
		return
	}
	sw.ResponseWriter = d
	defer func() { sw.ResponseWriter = rw; d.Clear() }()
	w.Write(b)
}

// toClient reports whether bytes written to w go to the client of the query, as they are
// (clientWriter).
func toClient(w dns.ResponseWriter) bool { return clientWriter(w) != nil }

// clientWriter returns the ScrubWriter beneath w when bytes written to w go to the client of the
// query, as they are, or nil: w is the writer CoreDNS's server gives the chain for a query (its
// ScrubWriter around the writer of miekg/dns, UDP, TCP or TLS; DoQ's and DoH's get WriteMsg),
// maybe wrapped by writers that pass Write on: the one plugin.NextOrFailure gives each plugin
// after the first (pluginWriter), and writers that say so (Unwrap). A plugin that asks the
// server a question of its own (pkg/upstream for file's out-of-zone CNAME targets, outbound for
// FQDN targets) captures the dns.Msg of the answer with a nonwriter, around its client's writer:
// Write would send the bytes to that client, so such an answer needs WriteMsg.
func clientWriter(w dns.ResponseWriter) *request.ScrubWriter {
	for range maxWrappers {
		switch v := w.(type) {
		case *request.ScrubWriter:
			switch v.ResponseWriter.(type) {
			case *nonwriter.Writer, *dnstest.Recorder:
				return nil
			case *dnsserver.DoQWriter, *dnsserver.DoHWriter:
				// DoQ's Write does not end the stream (its WriteMsg does: RFC 9250 4.2, the
				// STREAM FIN); DoH's unpacks the bytes into a dns.Msg again.
				return nil
			}
			if decorated(v.ResponseWriter) {
				return nil
			}
			return v
		case interface{ Unwrap() dns.ResponseWriter }:
			w = v.Unwrap()
		default:
			if w = passedOn(w); w == nil {
				return nil
			}
		}
	}
	return nil
}

// maxWrappers bounds the walk down the writers a query's writer is wrapped in.
const maxWrappers = 32

// pluginWriter is the type of the writer plugin.NextOrFailure wraps around the writer it is given
// for the next plugin (unexported in package plugin), and field the index of what it wraps, its
// embedded ResponseWriter. Its Write notes the plugin for the metrics and passes the bytes on as
// they are. A CoreDNS whose pluginWriter is not so leaves pluginWriter nil: answers behind it
// are written with WriteMsg.
var pluginWriter, pluginWriterField = func() (reflect.Type, int) {
	var t reflect.Type
	plugin.NextOrFailure("", plugin.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, _ *dns.Msg) (int, error) {
		t = reflect.TypeOf(w)
		return 0, nil
	}), context.Background(), nil, nil)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, 0
	}
	f, ok := t.Elem().FieldByName("ResponseWriter")
	if !ok || !f.Anonymous || len(f.Index) != 1 || f.Type != reflect.TypeFor[dns.ResponseWriter]() {
		return nil, 0
	}
	return t, f.Index[0]
}()

// passedOn returns the writer that w passes Write on to when w is plugin.NextOrFailure's, or nil.
func passedOn(w dns.ResponseWriter) dns.ResponseWriter {
	if pluginWriter == nil || reflect.TypeOf(w) != pluginWriter {
		return nil
	}
	v := reflect.ValueOf(w)
	if v.IsNil() {
		return nil
	}
	inner, _ := reflect.TypeAssert[dns.ResponseWriter](v.Elem().Field(pluginWriterField))
	return inner
}

// decorated reports whether w is miekg/dns's writer of a query whose WriteMsg writes through a
// dns.DecorateWriter (shed's, udpbatch's), which its Write passes by. dnsserver decorates a UDP
// listener with the decorator of any server block on it (Config.UDPDecorateWriterFunc), so
// packedPath, which sees routingpolicy's block only, cannot tell; the writer of each query can.
// It is miekg/dns's response, unexported: its field writer is itself unless decorated. When that
// cannot be read (another miekg/dns), w counts as decorated: answers get WriteMsg.
func decorated(w dns.ResponseWriter) bool {
	if d, known := udpanswer.IsDecorated(w); known {
		return d
	}
	t := reflect.TypeOf(w)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().Name() == "response" && t.Elem().PkgPath() == "github.com/miekg/dns"
}

// fits reports whether CoreDNS sends a message of n octets to the client of r as it is:
// request.Scrub truncates one larger than the client's buffer (Size) and compresses a UDP one
// larger than 1480 octets over IPv4, 1220 over IPv6.
func fits(w dns.ResponseWriter, r *dns.Msg, n int) bool {
	state := request.Request{W: w, Req: r}
	if n > state.Size() {
		return false
	}
	if state.Proto() == "udp" {
		if state.Family() == 1 {
			return n <= 1480
		}
		return n <= 1220
	}
	return true
}

// Header bits (RFC 1035 4.1.1).
const (
	flagQR = 1 << 15
	flagAA = 1 << 10
	flagRD = 1 << 8
	flagCD = 1 << 4
)

// appendReply appends the message of writePacked to b; ok is false when it cannot.
func appendReply(b []byte, r *dns.Msg, rep *reply, ecs *dns.EDNS0_SUBNET) (_ []byte, ok bool) {
	if len(r.Question) == 0 || rep.rcode > 0xF || rep.tc {
		return b, false // rep.tc: rare, WriteMsg sets TC
	}
	// dns.Msg.SetReply: ID, opcode, RD and CD copied for a QUERY.
	bits := uint16(r.Opcode)<<11 | uint16(rep.rcode) | flagQR //nolint:gosec // rcode checked, opcode is 4 bits
	if rep.authoritative() {
		bits |= flagAA
	}
	if r.Opcode == dns.OpcodeQuery {
		if r.RecursionDesired {
			bits |= flagRD
		}
		if r.CheckingDisabled {
			bits |= flagCD
		}
	}
	b = binary.BigEndian.AppendUint16(b, r.Id)
	b = binary.BigEndian.AppendUint16(b, bits)
	b = append(b, 0, 1, 0, 0, 0, 0, 0, 0) // counts: one question; the others below
	// The question as asked, case kept (RFC 1034 3.1, 0x20).
	q := &r.Question[0]
	if b, ok = appendName(b, q.Name); !ok {
		return b, false
	}
	b = binary.BigEndian.AppendUint16(b, q.Qtype)
	b = binary.BigEndian.AppendUint16(b, q.Qclass)

	an, owner, ownerAt, ownerEnd := 0, "", 0, 0
	for i := range rep.an {
		switch pt := &rep.an[i]; {
		case pt.rr != nil:
			var err error
			if b, err = appendRR(b, pt.rr); err != nil {
				return b, false
			}
			an++
		case pt.owner != "":
			// Synthesized from a wildcard: the owner's name, then the rest of each record.
			for _, sp := range pt.p.spans {
				if pt.owner == owner {
					b = append(b, b[ownerAt:ownerEnd]...)
				} else {
					ownerAt = len(b)
					if b, ok = appendName(b, pt.owner); !ok {
						return b, false
					}
					owner, ownerEnd = pt.owner, len(b)
				}
				b = append(b, pt.p.wire[sp.owner:sp.end]...)
			}
			an += len(pt.p.rrs)
		default:
			b = append(b, pt.p.wire...)
			an += len(pt.p.rrs)
		}
	}
	ns, ar := 0, 0
	if rep.ns != nil {
		b, ns = append(b, rep.ns.wire...), len(rep.ns.rrs)
	}
	if rep.extra != nil {
		b, ar = append(b, rep.extra.wire...), len(rep.extra.rrs)
	}
	if o := r.IsEdns0(); o != nil {
		if b, ok = appendOPT(b, o, ecs); !ok {
			return b, false
		}
		ar++
	}
	if an > 0xFFFF || ns > 0xFFFF || ar > 0xFFFF {
		return b, false
	}
	binary.BigEndian.PutUint16(b[6:], uint16(an))
	binary.BigEndian.PutUint16(b[8:], uint16(ns))
	binary.BigEndian.PutUint16(b[10:], uint16(ar))
	return b, true
}

// appendOPT appends the OPT record of the answer to a query with o: request.SizeAndDo's echo. For
// an answer that used the client subnet ecs (L-1), ServeDNS's OPT with the scope option (RFC 7871),
// which SizeAndDo gives the query's buffer size and DO bit; otherwise the query's OPT with version
// and extended rcode cleared, and of its options the ones CoreDNS echoes (edns.SupportedOption).
func appendOPT(b []byte, o *dns.OPT, ecs *dns.EDNS0_SUBNET) ([]byte, bool) {
	b = append(b, 0) // the root
	b = binary.BigEndian.AppendUint16(b, dns.TypeOPT)
	b = binary.BigEndian.AppendUint16(b, o.Hdr.Class) // the query's buffer size
	if ecs == nil {
		for _, e := range o.Option {
			if edns.SupportedOption(e.Option()) {
				return b, false // echoed options are packed by dns.Msg.Pack
			}
		}
		b = binary.BigEndian.AppendUint32(b, o.Hdr.Ttl&0xff00)
		return append(b, 0, 0), true
	}
	var ttl uint32
	if o.Do() {
		ttl = 1 << 15
	}
	b = binary.BigEndian.AppendUint32(b, ttl)
	rdlen := len(b)
	b = append(b, 0, 0)
	b, ok := appendScope(b, ecs)
	binary.BigEndian.PutUint16(b[rdlen:], uint16(len(b)-rdlen-2)) //nolint:gosec // at most 24 octets
	return b, ok
}

// appendScope appends the client subnet option of an answer that used e, region.ScopeOption's
// (the scope prefix is the source prefix, RFC 7871 7.2.1), as miekg/dns packs it: the address
// masked to the prefix, in as many octets as the prefix needs.
func appendScope(b []byte, e *dns.EDNS0_SUBNET) ([]byte, bool) {
	var a net.IP
	switch e.Family {
	case 1:
		if a = e.Address.To4(); e.SourceNetmask > net.IPv4len*8 || len(a) != net.IPv4len {
			return b, false
		}
	case 2:
		if a = e.Address; e.SourceNetmask > net.IPv6len*8 || len(a) != net.IPv6len {
			return b, false
		}
	default:
		return b, false // family 0 comes with a source prefix of 0, which locates nothing
	}
	n := (int(e.SourceNetmask) + 7) / 8
	b = binary.BigEndian.AppendUint16(b, dns.EDNS0SUBNET)
	b = binary.BigEndian.AppendUint16(b, uint16(4+n)) //nolint:gosec // at most 20
	b = binary.BigEndian.AppendUint16(b, e.Family)
	b = append(b, e.SourceNetmask, e.SourceNetmask)
	b = append(b, a[:n]...)
	if k := e.SourceNetmask % 8; k != 0 {
		b[len(b)-1] &= 0xff << (8 - k)
	}
	return b, true
}
