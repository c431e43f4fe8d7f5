package test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

// A reload whose new instance fails after the plugins' startup ran (here: a listener that cannot
// bind) is dropped by caddy without its shutdown hooks. What that startup took must be given back
// all the same (plugin/pkg/lifecycle), or the board would hold the failed Corefile's targets and
// their probes for ever (H-4: a reload never loses or leaks state). The old Corefile keeps serving.
func TestFailedReloadReleasesWhatItStarted(t *testing.T) {
	port := coretest.FreePort(t)
	// Hold the port the new Corefile wants, UDP and TCP.
	pc, err := net.ListenPacket("udp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	base := `example.org:0 {
	bind 127.0.0.1
	routingpolicy {
		wrr www A 30 "1=192.0.2.1"
		WRR_NEW
	}
	PSC
}
`
	s := coretest.Start(t, strings.NewReplacer("WRR_NEW", "", "PSC", "").Replace(base))
	next := strings.NewReplacer(
		"WRR_NEW", `wrr new A 30 "1=192.0.2.99"`,
		"PSC", `healthcheck {
		check web {
			protocol tcp
			port 9
			interval 300s
			timeout 1s
		}
	}
	pschealth {
		source s {
			backends 127.0.0.1
			check web
		}
		composite c {
			sources s
			destination 192.0.2.98
		}
	}`).Replace(base) + `other.org:` + port + ` {
	bind 127.0.0.1
	whoami
}
`
	if err := s.Reload(next); err == nil {
		t.Fatal("a Corefile whose port is taken was accepted")
	}
	if _, published := coretest.OnBoard(health.Default, health.Key{Addr: netip.MustParseAddr("192.0.2.98")}); published {
		t.Errorf("the failed reload's composite destination is still published")
	}
	if _, published := coretest.OnBoard(health.Default, health.Key{Check: "web", Addr: netip.MustParseAddr("127.0.0.1")}); published {
		t.Errorf("the failed reload's backend is still probed")
	}
	// H-6: the series of what the failed Corefile configured are gone with it.
	if got := seriesOf(t, "", "coredns_routingpolicy_wrr_configured_share", "name"); slices.Contains(got, "new.example.org./A") {
		t.Errorf("the failed reload's record set is still exported: %v", got)
	}
	if got := seriesOf(t, "", "coredns_pschealth_composite_state", "composite"); slices.Contains(got, "c") {
		t.Errorf("the failed reload's composite is still exported: %v", got)
	}
	if got := ask(t, s, "", "www.example.org"); got != "192.0.2.1" {
		t.Fatalf("after the failed reload: %q", got)
	}
	if r, err := s.Query("new.example.org", dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
		t.Fatalf("the failed Corefile's record is served: %v %v", r, err)
	}
}

// H-6: a reload that fails after startup is abandoned, whatever the Corefile it replaces: from a
// Corefile without any of our plugins, a reload to one with healthcheck that fails on a busy port
// gives back its probes, board references and series (plugin/pkg/lifecycle learns of every
// instance, not only those that use it).
func TestFailedReloadFromPlainCorefileReleasesH6(t *testing.T) {
	coretest.CaptureLog(t)
	s := coretest.Start(t, "plain.test:0 {\n\tbind 127.0.0.1\n\twhoami\n}\n")
	defer s.Stop()
	busy, port := busyListener(t)
	defer busy()
	err := s.Reload(fmt.Sprintf(`plain.test:0 {
	bind 127.0.0.1
	healthcheck {
		check h6-plain {
			protocol http
			port 9
			interval 1s
			timeout 500ms
		}
		loadbalancer 10.79.7.1 {
			backends 127.0.79.50
			check h6-plain
		}
	}
	whoami
}
busy.test:%s {
	bind 127.0.0.1
	whoami
}
`, port))
	if err == nil {
		t.Fatal("a reload onto a busy port succeeded")
	}
	for _, k := range []health.Key{{Check: "h6-plain", Addr: netip.MustParseAddr("127.0.79.50")}, {Addr: netip.MustParseAddr("10.79.7.1")}} {
		if coretest.Held(health.Default, k) {
			t.Errorf("%v: the abandoned instance still holds it on the board", k)
		}
	}
	if got := seriesOf(t, "", "coredns_healthcheck_target_state", "target"); slices.Contains(got, "10.79.7.1") {
		t.Errorf("target_state of the abandoned instance's VIP: %v", got)
	}
	if got := seriesOf(t, "", "coredns_healthcheck_probes_total", "check"); slices.Contains(got, "h6-plain") {
		t.Errorf("probes_total of the abandoned instance's check: %v", got)
	}
}
