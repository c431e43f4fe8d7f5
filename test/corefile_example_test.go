package test

import (
	"os"
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// Corefile.example is what `make run` serves: it must start with this build and answer, on a bare
// machine where none of its backends run (every policy fails open, R-WRR-7).
func TestCorefileExampleServes(t *testing.T) {
	b, err := os.ReadFile("../Corefile.example")
	if err != nil {
		t.Fatal(err)
	}
	// Free ports instead of the fixed ones, so the test runs beside `make run`.
	corefile := strings.NewReplacer(":1053", ":0", "127.0.0.1:8181", "127.0.0.1:0", "127.0.0.1:9153", "127.0.0.1:0", "127.0.0.1:8182", "127.0.0.1:0").Replace(string(b))
	s := coretest.Start(t, corefile)

	for _, name := range []string{"www", "app", "eu-data", "shop", "api", "ns1"} {
		r, err := s.Query(name+".coresteer.example", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || !r.Authoritative {
			t.Errorf("%s: rcode %s, %d answers, aa=%v", name, dns.RcodeToString[r.Rcode], len(r.Answer), r.Authoritative)
		}
	}
	r, err := s.Query("nothing.coresteer.example", dns.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeNameError || len(r.Ns) == 0 {
		t.Errorf("nothing.coresteer.example: rcode %s with %d authority records, want NXDOMAIN with the SOA", dns.RcodeToString[r.Rcode], len(r.Ns))
	}
}
