package routingpolicy

import (
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

// Clients: 10.1.0.0/16 has no subnet (the server's region, us-east1), 10.2.0.0/16 is in
// europe-west1 (Belgium, no item: London is nearest), 10.3.0.0/16 in asia-east1 (Taiwan, no item:
// Tokyo is nearest).
const geoLoc = `
		region us-east1
		subnet europe-west1 10.2.0.0/16
		subnet asia-east1 10.3.0.0/16
`

func geoBlock(opts string) string {
	return `routingpolicy example.org {` + geoLoc + `
		geo www A 60 "us-east1=10.0.1.1,10.0.1.2;europe-west2=10.0.2.1;asia-northeast1=10.0.3.1" ` + opts + `
	}`
}

func one(t *testing.T, rp *RoutingPolicy, client string) string {
	t.Helper()
	return addrs(ask(t, rp, "www.example.org.", dns.TypeA, client))
}

func TestGeoNearest(t *testing.T) {
	// R-GEO-1: the item of the source region answers; without one, the nearest.
	rp, _ := newTest(t, geoBlock(""))
	for client, want := range map[string]string{
		"10.1.1.1": "10.0.1.1,10.0.1.2",
		"10.2.1.1": "10.0.2.1",
		"10.3.1.1": "10.0.3.1",
	} {
		if got := one(t, rp, client); got != want {
			t.Errorf("client %s: got %s, want %s", client, got, want)
		}
	}
}

func TestGeoHealthyOnly(t *testing.T) {
	// R-GEO-2: only the healthy addresses of the item.
	rp, b := newTest(t, geoBlock("healthcheck web"))
	set(b, "web", "10.0.1.2", health.Unhealthy)
	for range 100 {
		if got := one(t, rp, "10.1.1.1"); got != "10.0.1.1" {
			t.Fatalf("got %s, want 10.0.1.1", got)
		}
	}
}

func TestGeoUncheckedStay(t *testing.T) {
	// R-GEO-3: the checked address (a VIP on the board) is unhealthy and the item has an
	// unchecked one: the unchecked one answers, the location does not change.
	rp, b := newTest(t, geoBlock(""))
	set(b, "", "10.0.1.1", health.Unhealthy)
	if got := one(t, rp, "10.1.1.1"); got != "10.0.1.2" {
		t.Fatalf("got %s, want the unchecked 10.0.1.2", got)
	}
}

func TestGeoFailoverToNext(t *testing.T) {
	// R-GEO-4: all addresses of the item unhealthy, no fencing: the next nearest location.
	rp, b := newTest(t, geoBlock("healthcheck web"))
	set(b, "web", "10.0.1.1", health.Unhealthy)
	set(b, "web", "10.0.1.2", health.Unhealthy)
	// From us-east1, London is nearer than Tokyo.
	if got := one(t, rp, "10.1.1.1"); got != "10.0.2.1" {
		t.Fatalf("got %s, want London 10.0.2.1", got)
	}
	set(b, "web", "10.0.2.1", health.Unhealthy)
	if got := one(t, rp, "10.1.1.1"); got != "10.0.3.1" {
		t.Fatalf("got %s, want Tokyo 10.0.3.1", got)
	}
}

func TestGeoFence(t *testing.T) {
	// R-GEO-5: fencing never leaves the location; all unhealthy returns all of its addresses.
	rp, b := newTest(t, geoBlock("fence healthcheck web"))
	set(b, "web", "10.0.1.1", health.Unhealthy)
	if got := one(t, rp, "10.1.1.1"); got != "10.0.1.2" {
		t.Fatalf("got %s, want 10.0.1.2", got)
	}
	set(b, "web", "10.0.1.2", health.Unhealthy)
	if got := one(t, rp, "10.1.1.1"); got != "10.0.1.1,10.0.1.2" {
		t.Fatalf("fenced: got %s, want both us-east1 addresses", got)
	}
}

func TestGeoFailOpen(t *testing.T) {
	// R-GEO-6: every location unhealthy: fail open to the nearest, all addresses.
	rp, b := newTest(t, geoBlock("healthcheck web"))
	for _, a := range []string{"10.0.1.1", "10.0.1.2", "10.0.2.1", "10.0.3.1"} {
		set(b, "web", a, health.Unhealthy)
	}
	if got := one(t, rp, "10.1.1.1"); got != "10.0.1.1,10.0.1.2" {
		t.Fatalf("got %s, want all us-east1 addresses", got)
	}
	if got := one(t, rp, "10.3.1.1"); got != "10.0.3.1" {
		t.Fatalf("got %s, want Tokyo", got)
	}
}

func TestGeoNoRegion(t *testing.T) {
	// A server without `region` and a client in no subnet: the first configured location.
	rp, _ := newTest(t, `routingpolicy example.org {
		geo www A 60 "europe-west2=10.0.2.1;us-east1=10.0.1.1"
	}`)
	if got := one(t, rp, "10.9.9.9"); got != "10.0.2.1" {
		t.Fatalf("got %s, want the first location", got)
	}
}
