package udpbatch

import (
	"reflect"
	"sync"

	"github.com/coredns/coredns/request"
	"github.com/coresteer/coresteer/plugin/pkg/udpanswer"

	"github.com/miekg/dns"
)

// writer is miekg/dns's writer of one UDP answer, decorated. It is also a dns.ResponseWriter
// (miekg/dns's, embedded) whose Write batches, for ServeDNS to hand to the plugins after it.
type writer struct {
	dns.ResponseWriter
	s   *socket
	l   *udpanswer.Layout // of the embedded writer's type
	seq uint64            // this query's number among the socket's arrivals
}

// Write implements dns.Writer: miekg/dns's WriteMsg calls it with the packed answer, and the
// plugins after udpbatch with what they packed.
func (w *writer) Write(b []byte) (int, error) { return w.s.write(w, b) }

// decorate is the socket's dns.DecorateWriter, applied to miekg/dns's writer of every query.
func (s *socket) decorate(w dns.Writer) dns.Writer {
	rw, ok := w.(dns.ResponseWriter)
	l := udpanswer.LayoutFor(w)
	if !ok || !l.OK() {
		s.mu.Lock()
		if !s.warned {
			s.warned = true
			log.Warningf("Batching is off on %s: miekg/dns's UDP writer %T is not the one udpbatch knows (fields udp, udpSession, writer; another miekg/dns version?); answers are written one by one, as without udpbatch", s.server, w)
		}
		s.mu.Unlock()
		return w
	}
	return &writer{ResponseWriter: rw, s: s, l: l, seq: s.arrivals.Add(1)}
}

// batched returns udpbatch's writer of the answer that miekg/dns's writer w writes, or nil when
// w is not miekg/dns's UDP writer or its writer is not ours (TCP, another decorator).
func batched(w dns.ResponseWriter) *writer {
	l := udpanswer.Known()
	if l == nil || reflect.TypeOf(w) != l.Type() {
		return nil
	}
	bw, _ := l.Decorated(w).(*writer)
	return bw
}

// maxWrappers bounds the walk down the plugins' ResponseWriter wrappers.
const maxWrappers = 16

// scrubWriter returns the ScrubWriter that dnsserver wrapped w in, found beneath the wrappers of
// the plugins before udpbatch (CoreDNS's own between two plugins, trace's recorder, nsid's
// writer: each embeds the ResponseWriter it wraps, as its field ResponseWriter), or nil.
func scrubWriter(w dns.ResponseWriter) *request.ScrubWriter {
	for range maxWrappers {
		if sw, ok := w.(*request.ScrubWriter); ok {
			return sw
		}
		if w = embedded(w); w == nil {
			return nil
		}
	}
	return nil
}

// embeddedField is, per wrapper type, the index of its embedded field ResponseWriter, or -1.
var embeddedField sync.Map // reflect.Type -> int

// embedded returns the ResponseWriter that the wrapper w embeds, or nil.
func embedded(w dns.ResponseWriter) dns.ResponseWriter {
	v := reflect.ValueOf(w)
	if !v.IsValid() {
		return nil
	}
	t := v.Type()
	i, ok := embeddedField.Load(t)
	if !ok {
		i = -1
		if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
			f, found := t.Elem().FieldByName("ResponseWriter")
			if found && f.Anonymous && len(f.Index) == 1 && f.Type == reflect.TypeFor[dns.ResponseWriter]() {
				i = f.Index[0]
			}
		}
		embeddedField.Store(t, i)
	}
	if i.(int) < 0 || v.IsNil() {
		return nil
	}
	inner, _ := reflect.TypeAssert[dns.ResponseWriter](v.Elem().Field(i.(int)))
	return inner
}
