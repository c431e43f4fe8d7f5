package health

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/coredns/caddy"
)

func TestDemandSharedPerInstance(t *testing.T) {
	c := caddy.NewTestController("dns", "")
	d := DemandOf(c)
	if DemandOf(c) != d {
		t.Fatal("two calls for one instance gave two demands")
	}
	if other := DemandOf(caddy.NewTestController("dns", "")); other == d {
		t.Fatal("two instances share a demand")
	}
	if !d.DefineCheck("web") || d.DefineCheck("web") {
		t.Fatal("DefineCheck does not report duplicates")
	}
	d.DefineCheck("api")
	if !d.HasCheck("web") || d.HasCheck("nope") {
		t.Fatal("HasCheck wrong")
	}
	if got := d.Checks(); len(got) != 2 || got[0] != "api" || got[1] != "web" {
		t.Fatalf("Checks() = %v", got)
	}
}

// prober records the pairs a Demand has it probe.
type prober map[Key]int

func (p prober) probe(k Key) func() {
	p[k]++
	return func() {
		if p[k]--; p[k] == 0 {
			delete(p, k)
		}
	}
}

func (p prober) keys() []string {
	var out []string
	for k := range maps.Keys(p) {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

// H-6: one way in. Wants made before the check is served, and after, reach its prober; a pair is
// probed once however many want it (H-3); the last release stops it; a block that stops serving
// stops its probes, and the wants it leaves behind reach the next block that serves the check.
func TestDemandH6(t *testing.T) {
	d := NewDemand()
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	web1, web2, api1 := Key{Check: "web", Addr: a}, Key{Check: "web", Addr: b}, Key{Check: "api", Addr: a}

	early := d.Want(web1) // setup or startup, before the block that defines web starts
	p := prober{}
	cancel := d.Serve("web", p.probe)
	if got := p.keys(); !slices.Equal(got, []string{"web/192.0.2.1"}) {
		t.Fatalf("after Serve: %v", got)
	}
	again := d.Want(web1) // a second record set naming the same pair
	late := d.Want(web2)  // a file reload adding an address
	other := d.Want(api1) // a check nobody serves (yet)
	if got := p.keys(); !slices.Equal(got, []string{"web/192.0.2.1", "web/192.0.2.2"}) || p[web1] != 1 {
		t.Fatalf("after later wants: %v (web1 probed %d times)", got, p[web1])
	}
	early()
	early() // a release is idempotent
	if p[web1] != 1 {
		t.Fatal("a pair still wanted stopped with its first release")
	}
	again()
	late()
	if got := p.keys(); len(got) != 0 {
		t.Fatalf("after every release: %v", got)
	}

	keep := d.Want(web2)
	cancel()
	if len(p) != 0 {
		t.Fatalf("after the block stops serving: %v", p.keys())
	}
	next := prober{}
	cancelNext := d.Serve("web", next.probe)
	if got := next.keys(); !slices.Equal(got, []string{"web/192.0.2.2"}) {
		t.Fatalf("the next server of web got %v", got)
	}
	cancel() // the old block's cancel again: no effect on the new one
	if len(next) != 1 {
		t.Fatal("a second cancel of the old server stopped the new one's probes")
	}
	keep()
	other()
	cancelNext()
	if len(next) != 0 || len(d.wants) != 0 {
		t.Fatalf("left: probed %v, wanted %d", next.keys(), len(d.wants))
	}
}

// H-2 and P-6: a pair only a dry run wants is probed but does not hold readiness back; it does
// once a consumer that answers from it wants it too, and again not when that one lets go.
func TestDemandGatesH2(t *testing.T) {
	d := NewDemand()
	k := Key{Check: "web", Addr: netip.MustParseAddr("192.0.2.1")}
	p := prober{}
	defer d.Serve("web", p.probe)()
	dry := d.WantUngated(k)
	if p[k] != 1 || d.Gates(k) {
		t.Fatalf("a dry run's want: probed %d, gates %v; want probed, not gating", p[k], d.Gates(k))
	}
	answers := d.Want(k)
	if p[k] != 1 || !d.Gates(k) {
		t.Fatalf("with a consumer that answers: probed %d, gates %v", p[k], d.Gates(k))
	}
	answers()
	answers()
	if p[k] != 1 || d.Gates(k) {
		t.Fatalf("after that consumer let go (twice): probed %d, gates %v", p[k], d.Gates(k))
	}
	dry()
	if len(p) != 0 || d.Gates(k) {
		t.Fatalf("after every release: probed %v, gates %v", p.keys(), d.Gates(k))
	}
}
