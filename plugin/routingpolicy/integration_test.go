package routingpolicy_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	_ "github.com/coresteer/coresteer/plugin/healthcheck"
	_ "github.com/coresteer/coresteer/plugin/outbound"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy"

	"github.com/miekg/dns"
)

func answerAddrs(m *dns.Msg) string {
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// listenPair listens on TCP on a and b with the same port, so one check port covers both.
func listenPair(t *testing.T, a, b string) (la, lb net.Listener, port int) {
	t.Helper()
	for range 20 {
		l1, err := net.Listen("tcp", a+":0")
		if err != nil {
			t.Fatal(err)
		}
		port = l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("%s:%d", b, port))
		if err != nil {
			l1.Close()
			continue
		}
		for _, l := range []net.Listener{l1, l2} {
			go func(l net.Listener) {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}(l)
		}
		t.Cleanup(func() { l1.Close(); l2.Close() })
		return l1, l2, port
	}
	t.Fatal("no common free port")
	return nil, nil, 0
}

// TestIntegrationHealthcheck runs a real server with a real healthcheck probing 127.0.0.x
// listeners: a backend that goes away leaves the answers after the unhealthy threshold (R-WRR-4,
// R-FO-2), and the answers come back when it returns.
func TestIntegrationHealthcheck(t *testing.T) {
	_, lb, port := listenPair(t, "127.0.0.21", "127.0.0.22")
	corefile := fmt.Sprintf(`example.org:0 {
	bind 127.0.0.1
	healthcheck {
		check web {
			protocol tcp
			port %d
			interval 1s
			timeout 500ms
			healthy_threshold 1
			unhealthy_threshold 1
		}
	}
	routingpolicy {
		region us-east1
		wrr www A 30 "1=127.0.0.21;1=127.0.0.22" healthcheck web
		failover fo A 30 "127.0.0.22" "us-east1=127.0.0.21" healthcheck web
	}
}`, port)
	s := coretest.Start(t, corefile)

	seen := func(name string, n int) map[string]int {
		out := map[string]int{}
		for range n {
			m, err := s.Query(name, dns.TypeA)
			if err != nil {
				t.Fatal(err)
			}
			out[answerAddrs(m)]++
		}
		return out
	}
	if got := seen("www.example.org.", 200); got["127.0.0.21"] == 0 || got["127.0.0.22"] == 0 {
		t.Fatalf("both backends up: %v", got)
	}
	if got := seen("fo.example.org.", 10); got["127.0.0.22"] != 10 {
		t.Fatalf("primary up: %v", got)
	}

	lb.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		www := seen("www.example.org.", 50)
		fo := seen("fo.example.org.", 5)
		if www["127.0.0.21"] == 50 && fo["127.0.0.21"] == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("127.0.0.22 still served 20s after it went away: www %v fo %v", www, fo)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Back up: served again.
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.22:%d", port))
	if err != nil {
		t.Skipf("cannot listen again on 127.0.0.22:%d: %v", port, err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	deadline = time.Now().Add(20 * time.Second)
	for {
		if fo := seen("fo.example.org.", 5); fo["127.0.0.22"] == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("primary not back 20s after it returned")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIntegrationGeoFromSubnets queries from different 127.x addresses mapped to regions (L-2).
func TestIntegrationGeoFromSubnets(t *testing.T) {
	s := coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	routingpolicy {
		region us-east1
		subnet europe-west2 127.0.2.0/24
		geo www A 30 "us-east1=192.0.2.1;europe-west2=192.0.2.2"
	}
}`)
	for from, want := range map[string]string{"127.0.0.1": "192.0.2.1", "127.0.2.5": "192.0.2.2"} {
		m, err := s.QueryFrom(from, "www.example.org.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if got := answerAddrs(m); got != want {
			t.Errorf("from %s: got %s, want %s", from, got, want)
		}
	}
}

func TestIntegrationCacheWarning(t *testing.T) {
	logs := coretest.CaptureLog(t)
	coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	cache
	routingpolicy {
		geo www A 30 "us-east1=192.0.2.1"
	}
}`)
	if logs.Count("cache is in the server block") != 1 {
		t.Fatalf("no cache warning in %q", logs)
	}
}

// An address that a record-set file reload adds to a health-checked policy is probed like the ones
// known at load time (H-3 through the board's prober), not served unchecked: a new address whose
// backend is down leaves the answers after its first failed probe (R-WRR-4).
func TestIntegrationFileReloadProbesNewAddress(t *testing.T) {
	_, _, port := listenPair(t, "127.0.0.31", "127.0.0.32")
	// 127.0.0.33 listens on nothing: its probes fail.
	file := filepath.Join(t.TempDir(), "rrsets.json")
	write := func(marker string, addrs ...string) {
		t.Helper()
		items := make([]string, 0, len(addrs))
		for _, a := range addrs {
			items = append(items, fmt.Sprintf(`{"weight": 1, "rrdatas": [%q]}`, a))
		}
		body := `[{"name": "www.example.org.", "type": "A", "ttl": 30, "routingPolicy": {"healthCheck": "web",
			"wrr": {"items": [` + strings.Join(items, ",") + `]}}},
			{"name": "marker.example.org.", "type": "TXT", "ttl": 30, "rrdatas": ["\"` + marker + `\""]}]`
		// Rewrite with a new size and time so the reload sees the change.
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Duration(len(addrs)) * time.Second)
		if err := os.Chtimes(file, later, later); err != nil {
			t.Fatal(err)
		}
	}
	write("first", "127.0.0.31", "127.0.0.32")
	s := coretest.Start(t, fmt.Sprintf(`example.org:0 {
	bind 127.0.0.1
	healthcheck {
		check web {
			protocol tcp
			port %d
			interval 1s
			timeout 500ms
			healthy_threshold 1
			unhealthy_threshold 1
		}
	}
	routingpolicy {
		recordsets %s
		reload 1s
	}
}`, port, file))

	write("second", "127.0.0.31", "127.0.0.32", "127.0.0.33")
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := s.Query("marker.example.org.", dns.TypeTXT)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Answer) == 1 && strings.Contains(m.Answer[0].String(), "second") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record-set file was not reloaded within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The new address is probed: its target is published by the check, and once its probe has
	// failed it leaves the answers.
	if _, probed := coretest.OnBoard(health.Default, health.Key{Check: "web", Addr: mustAddr("127.0.0.33")}); !probed {
		t.Fatal("the address the reload added is not probed")
	}
	for {
		got := map[string]int{}
		for range 100 {
			m, err := s.Query("www.example.org.", dns.TypeA)
			if err != nil {
				t.Fatal(err)
			}
			got[answerAddrs(m)]++
		}
		if got["127.0.0.33"] == 0 && got["127.0.0.31"] > 0 && got["127.0.0.32"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the reload added a dead address: %v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// DESIGN.md section 5: no policies on a zone that outbound forwards; a name under one of its
// except sub-zones is not forwarded, so a geo record set of regional resolvers may live there.
func TestIntegrationPolicyOnForwardedZone(t *testing.T) {
	corefile := func(name string) string {
		return `example.org:0 {
	bind 127.0.0.1
	routingpolicy example.org {
		region us-east1
		geo ` + name + ` A 30 "us-east1=10.0.0.53"
	}
	outbound corp.example.org {
		to 127.0.0.53
		private 127.0.0.0/8
		except resolvers.corp.example.org
	}
}`
	}
	if _, err := coretest.New(corefile("db.corp")); err == nil || !strings.Contains(err.Error(), "which outbound forwards") {
		t.Fatalf("policy on a forwarded name: %v, want an error", err)
	}
	s := coretest.Start(t, corefile("resolvers.corp"))
	r, err := s.Query("resolvers.corp.example.org", dns.TypeA)
	if err != nil || answerAddrs(r) != "10.0.0.53" {
		t.Fatalf("policy under except: %v %v", r, err)
	}
}

// writeKey generates a DNSSEC key for zone in dir and returns its base path.
func writeKey(t *testing.T, dir, zone string) string {
	t.Helper()
	k := &dns.DNSKEY{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeDNSKEY, Class: dns.ClassINET, Ttl: 3600},
		Flags: 257, Protocol: 3, Algorithm: dns.ECDSAP256SHA256}
	priv, err := k.Generate(256)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, fmt.Sprintf("K%s+%03d+%05d", zone, k.Algorithm, k.KeyTag()))
	if err := os.WriteFile(base+".key", []byte(k.String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".private", []byte(k.PrivateKeyString(priv)), 0o600); err != nil {
		t.Fatal(err)
	}
	return base
}

// TestIntegrationDNSSEC: dnssec in the same server block signs routingpolicy answers, and
// R-SEC-1 refuses a health-checked policy with two addresses in an item.
func TestIntegrationDNSSEC(t *testing.T) {
	base := writeKey(t, t.TempDir(), "example.org.")
	s := coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	dnssec {
		key file `+base+`
	}
	healthcheck {
		check web {
			port 9
		}
	}
	routingpolicy {
		wrr www A 30 "1=127.0.0.31;1=127.0.0.32" healthcheck web
	}
}`)
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	m.SetEdns0(4096, true)
	r, err := s.Exchange(m)
	if err != nil {
		t.Fatal(err)
	}
	sig := false
	for _, rr := range r.Answer {
		if _, ok := rr.(*dns.RRSIG); ok {
			sig = true
		}
	}
	if !sig {
		t.Fatalf("answer not signed: %v", r)
	}

	// R-SEC-1: one address per item with checks.
	_, err = coretest.New(`example.org:0 {
	bind 127.0.0.1
	dnssec {
		key file ` + base + `
	}
	healthcheck {
		check web {
			port 9
		}
	}
	routingpolicy {
		wrr www A 30 "1=127.0.0.31,127.0.0.33;1=127.0.0.32" healthcheck web
	}
}`)
	if err == nil || !strings.Contains(err.Error(), "one address per item") {
		t.Fatalf("R-SEC-1 not enforced: %v", err)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// series returns the values of label of the series of metric name in the process registry.
func series(t *testing.T, name, label string) []string {
	t.Helper()
	var out []string
	for _, l := range coretest.Series(t, name) {
		if v, ok := l[label]; ok {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestIntegrationTruncation: an answer larger than the client's UDP buffer sets TC, and TCP
// carries it whole.
func TestIntegrationTruncation(t *testing.T) {
	var items []string
	for i := 1; i <= 60; i++ {
		items = append(items, fmt.Sprintf("192.0.2.%d", i))
	}
	s := coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	routingpolicy {
		wrr big A 30 "1=`+strings.Join(items, ",")+`"
	}
}`)
	m, err := s.Query("big.example.org.", dns.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Truncated || len(m.Answer) >= 60 {
		t.Fatalf("UDP answer of 60 records: TC %v, %d records", m.Truncated, len(m.Answer))
	}
	q := new(dns.Msg)
	q.SetQuestion("big.example.org.", dns.TypeA)
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	r, _, err := c.Exchange(q, s.TCP)
	if err != nil {
		t.Fatal(err)
	}
	if r.Truncated || len(r.Answer) != 60 {
		t.Fatalf("TCP answer: TC %v, %d records", r.Truncated, len(r.Answer))
	}
}

// TestIntegrationRoot: zonefile and recordsets paths are relative to the root directive, as
// file's are.
func TestIntegrationRoot(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "db.example.org"), []byte("$ORIGIN example.org.\n@ 60 IN NS ns.example.net.\nzf 60 IN A 192.0.2.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rs.yaml"), []byte("- {name: rs.example.org., type: A, ttl: 60, rrdatas: [192.0.2.2]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	root `+dir+`
	routingpolicy {
		zonefile db.example.org
		recordsets rs.yaml
	}
}`)
	for name, want := range map[string]string{"zf.example.org.": "192.0.2.1", "rs.example.org.": "192.0.2.2"} {
		m, err := s.Query(name, dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if got := answerAddrs(m); got != want {
			t.Errorf("%s: %q, want %s", name, got, want)
		}
	}
}
