package chain

import (
	"slices"
	"strings"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
)

func index(t *testing.T, d []string, name string) int {
	t.Helper()
	i := slices.Index(d, name)
	if i < 0 {
		t.Fatalf("%s not in the chain", name)
	}
	return i
}

// DESIGN.md section 1: the order of our directives in CoreDNS's chain.
func TestOrder(t *testing.T) {
	d, err := Order(dnsserver.Directives)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != len(dnsserver.Directives)+len(Names()) {
		t.Fatalf("chain has %d directives, want %d", len(d), len(dnsserver.Directives)+len(Names()))
	}
	// status with health and ready, right after health.
	if index(t, d, "status") != index(t, d, "health")+1 {
		t.Errorf("status at %d, health at %d: want right after", index(t, d, "status"), index(t, d, "health"))
	}
	hc, psc := index(t, d, "healthcheck"), index(t, d, "pschealth")
	rp, ob := index(t, d, "routingpolicy"), index(t, d, "outbound")

	// The health plugins early, healthcheck first, before every consumer.
	if hc != index(t, d, "metadata")+1 || psc != hc+1 {
		t.Errorf("healthcheck at %d, pschealth at %d: want both right after metadata (%d)", hc, psc, index(t, d, "metadata"))
	}
	// routingpolicy immediately before file, after cache and dnssec.
	if rp+1 != index(t, d, "file") {
		t.Errorf("routingpolicy at %d, file at %d: want immediately before", rp, index(t, d, "file"))
	}
	if rp < index(t, d, "cache") || rp < index(t, d, "dnssec") {
		t.Error("routingpolicy must come after cache and dnssec")
	}
	// outbound immediately before forward, after cache.
	if ob+1 != index(t, d, "forward") || ob < index(t, d, "cache") {
		t.Errorf("outbound at %d, forward at %d: want immediately before, after cache", ob, index(t, d, "forward"))
	}
	// udpbatch right after shed, so it sees whether shed already decorates the UDP writer.
	if ub := index(t, d, "udpbatch"); ub != index(t, d, "shed")+1 {
		t.Errorf("udpbatch at %d, shed at %d: want right after", ub, index(t, d, "shed"))
	}
	if hc > rp || psc > rp || hc > ob || psc > ob {
		t.Error("the health plugins must set up before their consumers")
	}
	// Every in-tree directive keeps its relative order.
	var rest []string
	for _, n := range d {
		if !slices.Contains(Names(), n) {
			rest = append(rest, n)
		}
	}
	if !slices.Equal(rest, dnsserver.Directives) {
		t.Error("the in-tree directives changed order")
	}
}

func TestOrderIdempotent(t *testing.T) {
	once, _ := Order(dnsserver.Directives)
	twice, err := Order(once)
	if err != nil || !slices.Equal(once, twice) {
		t.Fatalf("ordering twice changed the chain: %v", err)
	}
}

func TestOrderMissingAnchor(t *testing.T) {
	_, err := Order([]string{"metadata", "health", "cache", "forward"})
	if err == nil || !strings.Contains(err.Error(), `directive "file" not in the chain`) {
		t.Fatalf("error = %v, want one naming the missing anchor", err)
	}
}

func TestInstall(t *testing.T) {
	want, _ := Order(dnsserver.Directives)
	Install()
	Install()
	if !slices.Equal(dnsserver.Directives, want) {
		t.Fatal("Install did not place the directives exactly once")
	}
}
