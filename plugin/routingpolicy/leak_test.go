package routingpolicy_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// TestIntegrationReloadNoLeak reloads a Corefile whose block runs a file reload loop and checks
// that no goroutine outlives the server, and that the metric series and board references follow
// the configuration (H-6): a record set that a reload removes, or the shutdown, takes its series
// and its board targets with it.
func TestIntegrationReloadNoLeak(t *testing.T) {
	opts := append(coretest.ServerLoops(), goleak.IgnoreCurrent())
	defer coretest.NoLeak(t, opts...)
	dir := t.TempDir()
	f := filepath.Join(dir, "rs.yaml")
	if err := os.WriteFile(f, []byte("- {name: www.example.org., type: A, routingPolicy: {wrr: {items: [{weight: 1, rrdatas: [192.0.2.77]}]}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	corefile := func(extra string) string {
		return `example.org:0 {
	bind 127.0.0.1
	routingpolicy {
		reload 1s
		recordsets ` + f + `
		` + extra + `
	}
}`
	}
	s, err := coretest.New(corefile(""))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		extra := ""
		if i%2 == 0 {
			extra = `wrr w2 A 30 "1=192.0.2.78"`
		}
		if err := s.Reload(corefile(extra)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.Query("www.example.org.", dns.TypeA)
	if err != nil || len(m.Answer) != 1 {
		t.Fatalf("after reloads: %v %v", m, err)
	}
	const share = "coredns_routingpolicy_wrr_configured_share"
	if got := series(t, share, "name"); !slices.Equal(got, []string{"w2.example.org./A", "www.example.org./A"}) {
		t.Fatalf("%s names %v after reloads", share, got)
	}
	if err := s.Reload(corefile("")); err != nil {
		t.Fatal(err)
	}
	if got := series(t, share, "name"); !slices.Equal(got, []string{"www.example.org./A"}) {
		t.Fatalf("%s names %v after a reload removed w2", share, got)
	}
	// The board holds what is served and nothing else.
	www, w2 := health.Key{Addr: mustAddr("192.0.2.77")}, health.Key{Addr: mustAddr("192.0.2.78")}
	if !coretest.Held(health.Default, www) || coretest.Held(health.Default, w2) {
		t.Fatalf("after a reload removed w2: %v held %v, %v held %v", www, coretest.Held(health.Default, www), w2, coretest.Held(health.Default, w2))
	}
	s.Stop()
	if got := series(t, share, "name"); len(got) != 0 {
		t.Fatalf("%s names %v after shutdown", share, got)
	}
	if coretest.Held(health.Default, www) {
		t.Fatalf("%v still held on the board after shutdown", www)
	}
}
