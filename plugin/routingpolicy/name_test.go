package routingpolicy

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/request"

	"github.com/miekg/dns"
)

// TestQueryName: R-ZONE-1: ServeDNS looks a query up under the name request.Request.Name gives
// (lower case, presentation form), in the canonical form of its escapes when the server built it
// (`\097bc` is `abc`, as file compares names), whatever the name: plain, mixed case, with escapes,
// with raw octets a plugin put there, empty labels, none at all. The fast path for printable names
// must give what the slow one does.
func TestQueryName(t *testing.T) {
	names := []string{"www.example.org.", "WwW.ExAmPlE.oRg.", ".", "", "a..b.", `x\.y.example.org.`, `a\255b.`, `\097bc.`,
		"caf\xc3\xa9.example.org.", "my printer.", "a(b).", `a\`, "no-dot", "A@B.", "\x00.", "~.", "{|}."}
	names = slices.Grow(names, 10000)
	r := rand.New(rand.NewPCG(3, 4))
	const octets = "aZ.-_\\09 (@\x7f\xc3~"
	for range 10000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = octets[r.IntN(len(octets))]
		}
		names = append(names, string(b))
	}
	for _, name := range names {
		m := new(dns.Msg)
		m.Question = []dns.Question{{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}}
		want := (&request.Request{Req: m}).Name()
		if strings.IndexByte(want, '\\') >= 0 && !wireEscaped(want) {
			want = canonicalName(want)
		}
		if got := queryName(&request.Request{Req: m}); got != want {
			t.Errorf("queryName(%q) = %q, request.Request.Name %q", name, got, want)
		}
	}
	if got := queryName(&request.Request{Req: new(dns.Msg)}); got != "." {
		t.Errorf("queryName of a query without a question: %q, want .", got)
	}
}
