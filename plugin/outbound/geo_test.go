package outbound

import (
	"fmt"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	_ "github.com/coresteer/coresteer/plugin/routingpolicy" // the geo zone the FQDN target resolves in

	"github.com/miekg/dns"
)

// O-8 with routingpolicy: an FQDN target answered by a geo zone in the same server gives clients
// in two regions two different resolvers, and each client's query leaves through the endpoint of
// its region (O-5 cold start).
func TestFQDNTargetGeoZone(t *testing.T) {
	r1 := startResolver(t, "127.0.0.31")
	r2 := startResolverPort(t, "127.0.0.32", r1.port())
	s := coretest.Start(t, `.:0 {
	bind 127.0.0.1
	routingpolicy corp. {
		subnet europe-west1 127.0.1.0/24
		subnet us-east1 127.0.2.0/24
		geo resolvers A 30 "europe-west1=127.0.0.31;us-east1=127.0.0.32"
	}
	outbound example. {
		to resolvers.corp:`+r1.port()+`
		private 127.0.0.0/8
		endpoint eu europe-west1 127.0.0.11
		endpoint us us-east1 127.0.0.12
		subnet europe-west1 127.0.1.0/24
		subnet us-east1 127.0.2.0/24
	}
}`)
	for i := range 3 {
		if m := mustQuery(t, s, "127.0.1.1", fmt.Sprintf("e%d.example.", i)); m.Rcode != dns.RcodeSuccess {
			t.Fatalf("eu client: %s", dns.RcodeToString[m.Rcode])
		}
		if m := mustQuery(t, s, "127.0.2.1", fmt.Sprintf("u%d.example.", i)); m.Rcode != dns.RcodeSuccess {
			t.Fatalf("us client: %s", dns.RcodeToString[m.Rcode])
		}
	}
	if n, src := r1.clients.Load(), r1.count("127.0.0.11"); n != 3 || src != 3 {
		t.Errorf("O-8: europe resolver got %d queries (%d from the eu endpoint), want 3 and 3 (%v)", n, src, r1.sourceSet())
	}
	if n, src := r2.clients.Load(), r2.count("127.0.0.12"); n != 3 || src != 3 {
		t.Errorf("O-8: us resolver got %d queries (%d from the us endpoint), want 3 and 3 (%v)", n, src, r2.sourceSet())
	}
}
