package outbound

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// O-2: an endpoint with several sources picks one per target, always the same, and spreads
// targets over its sources.
func TestStableSourcePerTarget(t *testing.T) {
	e := &Endpoint{Name: "eu", Sources: []netip.Prefix{netip.MustParsePrefix("127.0.0.11/32"), netip.MustParsePrefix("127.0.0.13/32")}}
	if err := e.resolve(interfaceAddrs); err != nil {
		t.Fatal(err)
	}
	used := map[netip.Addr]int{}
	for i := range 64 {
		tgt := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i), 53}), 53)
		a := e.sourceFor(tgt)
		for range 3 {
			if b := e.sourceFor(tgt); b != a {
				t.Fatalf("O-2: target %s got sources %s and %s", tgt, a, b)
			}
		}
		used[a]++
	}
	// 64 targets on 2 sources by a hash: all on one side has probability 2^-63.
	if len(used) != 2 {
		t.Errorf("O-2: targets not spread over the sources: %v", used)
	}
}

// O-2 on the wire: every query to one resolver through a two-source endpoint leaves from the same
// source.
func TestStableSourceOnTheWire(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nendpoint eu europe-west1 127.0.0.11 127.0.0.13\n}")
	for i := range 10 {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("s%d.example.", i), dns.TypeA)
		serve(t, o, m)
	}
	if got := r.sourceSet(); len(got) != 1 {
		t.Errorf("O-2: queries to one target left from %v", got)
	}
}
