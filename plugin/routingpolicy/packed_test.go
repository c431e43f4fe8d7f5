package routingpolicy_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// debugLog captures what the plugins log until t ends. A server block with debug logs debug
// lines too (and turns them off when t ends).
func debugLog(t *testing.T) *coretest.Log {
	t.Helper()
	l := coretest.CaptureLog(t)
	t.Cleanup(clog.D.Clear)
	return l
}

// TestIntegrationPackedPath: answers are written as packed bytes in a server block where no
// plugin before routingpolicy needs their dns.Msg, and with WriteMsg where one does, which then
// sees the answer as it is: prometheus counts an NXDOMAIN as NXDOMAIN, log logs its rcode, cache
// serves the second query from its cache, dnssec signs. The startup decision is logged (debug).
func TestIntegrationPackedPath(t *testing.T) {
	key := writeKey(t, t.TempDir(), "example.org.")
	for _, tc := range []struct {
		name    string
		plugins string
		packed  bool
		check   func(t *testing.T, s *coretest.Server, port string, l *coretest.Log)
	}{
		{"alone", "", true, nil},
		{"errors, metadata, healthcheck", "errors\n\tmetadata\n\thealthcheck {\n\t\tcheck web {\n\t\t\tport 9\n\t\t}\n\t}", true, nil},
		{"prometheus", "prometheus 127.0.0.1:0", false, func(t *testing.T, s *coretest.Server, port string, _ *coretest.Log) {
			t.Helper()
			labels := map[string]string{"server": "dns://127.0.0.1:" + port, "rcode": "NXDOMAIN"}
			before := coretest.Sum(t, "coredns_dns_responses_total", labels)
			if m, err := s.Query("nx.example.org.", dns.TypeA); err != nil || m.Rcode != dns.RcodeNameError {
				t.Fatalf("nx.example.org.: %v %v", m, err)
			}
			// prometheus counts after the answer is written: the client can read it first.
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				after := coretest.Sum(t, "coredns_dns_responses_total", labels)
				if after == before+1 {
					break
				}
				if after > before+1 || time.Now().After(deadline) {
					t.Fatalf("prometheus counted %v NXDOMAIN answers for one", after-before)
				}
			}
		}},
		{"log", "log", false, func(t *testing.T, s *coretest.Server, _ string, l *coretest.Log) {
			t.Helper()
			if _, err := s.Query("nx2.example.org.", dns.TypeA); err != nil {
				t.Fatal(err)
			}
			// log writes its line after the answer is sent: wait for it.
			for deadline := time.Now().Add(5 * time.Second); l.Count(`"A IN nx2.example.org. udp`, "NXDOMAIN") != 1; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("log did not log the NXDOMAIN answer:\n%s", l)
				}
			}
		}},
		{"cache", "cache 60", false, func(t *testing.T, s *coretest.Server, port string, _ *coretest.Log) {
			t.Helper()
			labels := map[string]string{"server": "dns://127.0.0.1:" + port}
			before := coretest.Sum(t, "coredns_cache_hits_total", labels)
			for range 2 {
				if m, err := s.Query("www.example.org.", dns.TypeTXT); err != nil || m.Rcode != dns.RcodeSuccess || len(m.Ns) != 1 {
					t.Fatalf("www.example.org. TXT: %v %v", m, err)
				}
			}
			if after := coretest.Sum(t, "coredns_cache_hits_total", labels); after != before+1 {
				t.Errorf("cache served %v of two queries, want the second", after-before)
			}
		}},
		{"dnssec", "dnssec {\n\t\tkey file " + key + "\n\t}", false, func(t *testing.T, s *coretest.Server, _ string, _ *coretest.Log) {
			t.Helper()
			m := new(dns.Msg)
			m.SetQuestion("www.example.org.", dns.TypeA)
			m.SetEdns0(4096, true)
			r, err := s.Exchange(m)
			if err != nil || len(r.Answer) != 2 || r.Answer[1].Header().Rrtype != dns.TypeRRSIG {
				t.Errorf("dnssec did not sign: %v %v", r, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := debugLog(t)
			port := coretest.FreePort(t)
			s := coretest.Start(t, fmt.Sprintf(`example.org:%s {
	bind 127.0.0.1
	debug
	%s
	routingpolicy {
		record www A 30 192.0.2.1
	}
}`, port, tc.plugins))
			if m, err := s.Query("www.example.org.", dns.TypeA); err != nil || len(m.Answer) != 1 {
				t.Fatalf("www.example.org.: %v %v", m, err)
			}
			packed, writeMsg := l.Count("written as packed bytes"), l.Count("written with WriteMsg")
			if tc.packed && (packed != 1 || writeMsg != 0) || !tc.packed && (packed != 0 || writeMsg != 1) {
				t.Fatalf("want packed %v; logged:\n%s", tc.packed, l)
			}
			if tc.check != nil {
				tc.check(t, s, port, l)
			}
		})
	}
}

// TestIntegrationPackedBytes: R-ZONE-1: what a server sends is the same whether routingpolicy
// writes packed bytes or a dns.Msg. One server serves each zone of TestParityWithFile's
// generator, with geo, failover and WRR record sets besides, in two server blocks: routingpolicy
// alone (packed bytes) and behind prometheus (WriteMsg). Every question of the generator, in
// mixed case, is sent to both as the same datagram, asked every way (EDNS0 or not, buffer sizes,
// DO, client subnets), over UDP and TCP: the answers must be the same octets.
func TestIntegrationPackedBytes(t *testing.T) {
	total := 0
	for seed := range uint64(4) {
		total += packedSeed(t, seed+1)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d questions, the same octets either way", total)
}

func packedSeed(t *testing.T, seed uint64) int {
	t.Helper()
	g := newZoneGen(seed)
	g.generate()
	path := filepath.Join(t.TempDir(), "db.example.org")
	text := g.text()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// Policies whose answers draw no random numbers (one address per item, no trickle), so both
	// blocks answer alike.
	block := `routingpolicy {
		zonefile ` + path + `
		reload 0
		public
		region us-east1
		subnet europe-west2 10.2.0.0/16 2001:db8:2::/48
		geo pgeo A 30 "us-east1=192.0.2.201;europe-west2=192.0.2.203"
		failover pfo A 30 "192.0.2.211" "us-east1=192.0.2.212;europe-west2=192.0.2.213"
		wrr *.pwrr TXT 30 "1=\"one\""
	}`
	p1, p2 := coretest.FreePort(t), coretest.FreePort(t)
	s, err := coretest.New(fmt.Sprintf("example.org:%s {\n\tbind 127.0.0.1\n\t%s\n}\nexample.org:%s {\n\tbind 127.0.0.1\n\tprometheus 127.0.0.1:%s\n\t%s\n}",
		p1, block, p2, coretest.FreePort(t), block))
	if err != nil {
		t.Fatalf("seed %d: the server did not start: %v\nzone:\n%s", seed, err, text)
	}
	defer s.Stop()
	qs := g.questions()
	for _, name := range []string{"pgeo", "pfo", "x.pwrr", "a.b.pwrr"} {
		qs = append(qs, question{name: g.mixCase(name + "." + parityOrigin), qtype: dns.TypeA}, question{name: name + "." + parityOrigin, qtype: dns.TypeTXT})
	}
	for i, q := range qs {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.Id = uint16(i)
		switch i % 6 {
		case 1:
			m.SetEdns0(1232, true)
		case 2:
			m.SetEdns0(4096, false)
		case 3:
			m.SetEdns0(512, true)
		case 4, 5:
			m.SetEdns0(1232, i%2 == 0)
			e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.ParseIP("10.2.3.0").To4()}
			if i%5 == 0 {
				e = &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 2, SourceNetmask: 56, Address: net.ParseIP("2001:db8:9::")}
			}
			m.IsEdns0().Option = append(m.IsEdns0().Option, e)
		}
		query, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		network := "udp"
		if i%7 == 0 {
			network = "tcp"
		}
		packed, writeMsg := exchangeRaw(t, network, "127.0.0.1:"+p1, query), exchangeRaw(t, network, "127.0.0.1:"+p2, query)
		if !bytes.Equal(packed, writeMsg) {
			a, b := new(dns.Msg), new(dns.Msg)
			a.Unpack(packed)
			b.Unpack(writeMsg)
			t.Fatalf("seed %d: %s %s over %s:\nrouting policy alone (packed):\n%v\n%x\nbehind prometheus (WriteMsg):\n%v\n%x\nzone:\n%s",
				seed, q.name, dns.TypeToString[q.qtype], network, a, packed, b, writeMsg, text)
		}
	}
	return len(qs)
}

// exchangeRaw sends query to addr over network (udp or tcp) and returns the answer as it came.
func exchangeRaw(t *testing.T, network, addr string, query []byte) []byte {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if network == "udp" {
		if _, err := c.Write(query); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, dns.MaxMsgSize)
		n, err := c.Read(b)
		if err != nil {
			t.Fatalf("%s %s: %v", network, addr, err)
		}
		return b[:n]
	}
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(query))), query...)); err != nil {
		t.Fatal(err)
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatalf("%s %s: %v", network, addr, err)
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIntegrationPackedSelfLookup: file answers a CNAME to a name routingpolicy serves in the same
// server by asking the server itself (pkg/upstream, through a nonwriter): routingpolicy's answer
// reaches file, which puts it after its CNAME, and the client gets file's answer only.
func TestIntegrationPackedSelfLookup(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "db.example.net"), []byte("$ORIGIN example.net.\n$TTL 60\n@ SOA ns1 h 1 2 3 4 5\n@ NS ns1.example.org.\nwww CNAME geo.example.org.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := coretest.FreePort(t)
	s := coretest.Start(t, fmt.Sprintf(`example.net:%s {
	bind 127.0.0.1
	file %s
}
example.org:%s {
	bind 127.0.0.1
	routingpolicy {
		geo geo A 30 "us-east1=192.0.2.1"
	}
}`, port, filepath.Join(dir, "db.example.net"), port))
	for range 3 {
		m, err := s.Query("www.example.net.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Answer) != 2 || m.Answer[1].Header().Rrtype != dns.TypeA || m.Question[0].Name != "www.example.net." {
			t.Fatalf("www.example.net. A: want file's CNAME and routingpolicy's address, got %v", m)
		}
	}
}
