package health

import (
	"net/netip"
	"testing"

	"github.com/coredns/caddy"
)

// H-3: consumers of one instance share one Demand; a key wanted twice is probed once.
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
	a := netip.MustParseAddr("192.0.2.1")
	d.Want(Key{Check: "web", Addr: a})
	d.Want(Key{Check: "web", Addr: a})
	d.Want(Key{Check: "api", Addr: a})
	if got := d.Wanted(); len(got) != 2 || got[0].Check != "api" {
		t.Fatalf("Wanted() = %v", got)
	}
}
