package test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
)

// sixSigma returns the bounds within which a binomial count of n draws with probability p falls
// except about once in 500 million runs.
func sixSigma(n int, p float64) (lo, hi int) {
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	return int(math.Floor(mean - 6*sd)), int(math.Ceil(mean + 6*sd))
}

// Scenario 6 — psc-health.es.txt, "comprobación de estado compuesta" and "destino": the health of
// a published service in each region is a composite over its backend services, published under the
// service's forwarding-rule address; a failover record set over the two destinations moves clients
// to region B when region A's service fails its aggregation policy, and back when it recovers.
// The same with dry_run: the composite is computed and reported, answers never move (P-6).
func TestScenarioCrossRegionFailoverThroughComposites(t *testing.T) {
	for _, dryRun := range []bool{false, true} {
		t.Run(fmt.Sprintf("dry_run=%v", dryRun), func(t *testing.T) {
			net := "127.0.61."
			if dryRun {
				net = "127.0.62."
			}
			a1, a2, a3, b1, b2 := net+"11", net+"12", net+"13", net+"21", net+"22"
			web := startBackends(t, a1, a2, a3, b1, b2)
			dry := ""
			if dryRun {
				dry = "dry_run"
			}
			s := coretest.Start(t, fmt.Sprintf(`example.org:0 {
	bind 127.0.0.1
	%s
	pschealth {
		policy strict min_healthy_percent 60 min_healthy 2
		source a-web {
			backends %s %s %s
			check web
			policy strict
		}
		source b-web {
			backends %s %s
			check web
		}
		composite service-a {
			sources a-web
			destination %s100
		}
		composite service-b {
			sources b-web
			destination %s200
		}
		%s
	}
	routingpolicy example.org {
		region us-east1
		failover shop A 30 "%s100" "us-east1=%s200"
	}
}`, webCheck(""), a1, a2, a3, b1, b2, net, net, dry, net, net))

			waitFor(t, s, "", "shop.example.org", net+"100")
			// 2 of 3 healthy: 66 % and 2 meet the policy.
			web[a1].ok.Store(false)
			time.Sleep(2500 * time.Millisecond) // two probe rounds for the verdict to land
			if got := ask(t, s, "", "shop.example.org"); got != net+"100" {
				t.Fatalf("with 2 of 3 backends healthy the answer moved to %q", got)
			}
			// 1 of 3: below 60 % and 2: region A's service is unhealthy.
			web[a2].ok.Store(false)
			if dryRun {
				time.Sleep(2500 * time.Millisecond)
				for range 50 {
					if got := ask(t, s, "", "shop.example.org"); got != net+"100" {
						t.Fatalf("dry_run moved answers to %q", got)
					}
				}
				return
			}
			waitFor(t, s, "", "shop.example.org", net+"200")
			web[a1].ok.Store(true)
			waitFor(t, s, "", "shop.example.org", net+"100")
		})
	}
}

// Scenario 7 — routing-policies-and-health-checks.zh.txt, WRR: "split traffic between the
// production and the experimental version" with health checks: a 90/10 canary answers in
// proportion (R-WRR-2); when the canary fails its checks its share goes to the other item (R-WRR-4).
func TestScenarioCanaryWRRWithHealthChecks(t *testing.T) {
	stable, canary := "127.0.71.1", "127.0.71.2"
	web := startBackends(t, stable, canary)
	s := coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	`+webCheck("")+`
	routingpolicy example.org {
		wrr www A 30 "90=`+stable+`;10=`+canary+`" healthcheck web
	}
}`)
	const n = 2000
	count := tally(t, s, "", "www.example.org", n)
	lo, hi := sixSigma(n, 0.1)
	if c := count[canary]; c < lo || c > hi || count[stable]+c != n {
		t.Fatalf("canary answered %d of %d (stable %d), want %d..%d", c, n, count[stable], lo, hi)
	}

	web[canary].ok.Store(false)
	waitGone(t, s, "", "www.example.org", canary)
	if count := tally(t, s, "", "www.example.org", 500); count[stable] != 500 {
		t.Fatalf("with the canary unhealthy: %v, want every answer %s", count, stable)
	}
}

// Scenario 8 — routing-policies-and-health-checks.zh.txt, failover with trickle: "gradually move
// traffic to the backup VIP to verify it works ... 0 to 1 ... typical 0.1 ... 100 % to trigger a
// manual failover": trickle 0.1 sends a tenth of the queries to the backup while the primary is
// healthy (R-FO-3); a reload to trickle 1.0 is a manual failover.
func TestScenarioTrickleThenManualFailover(t *testing.T) {
	primary, backup := "127.0.81.1", "127.0.81.2"
	startBackends(t, primary, backup)
	corefile := func(trickle string) string {
		return `example.org:0 {
	bind 127.0.0.1
	` + webCheck("") + `
	routingpolicy example.org {
		region us-east1
		failover api A 30 "` + primary + `" "us-east1=` + backup + `" trickle ` + trickle + ` healthcheck web
	}
}`
	}
	s := coretest.Start(t, corefile("0.1"))
	const n = 2000
	count := tally(t, s, "", "api.example.org", n)
	lo, hi := sixSigma(n, 0.1)
	if c := count[backup]; c < lo || c > hi || count[primary]+c != n {
		t.Fatalf("trickle 0.1: backup answered %d of %d, want %d..%d (all: %v)", c, n, lo, hi, count)
	}

	if err := s.Reload(corefile("1.0")); err != nil {
		t.Fatal(err)
	}
	if count := tally(t, s, "", "api.example.org", 300); count[backup] != 300 {
		t.Fatalf("trickle 1.0 after reload: %v, want every answer %s", count, backup)
	}
}

// Scenario 9 — routing-policies-and-health-checks.zh.txt, "geolocation with geofencing ... traffic
// stays in the region even when every endpoint there fails its health checks ... returns all the
// IP addresses" (R-GEO-5), while the unfenced policy fails over to the next nearest (R-GEO-4).
func TestScenarioGeofencing(t *testing.T) {
	eu1, eu2, us1 := "127.0.91.1", "127.0.91.2", "127.0.91.3"
	web := startBackends(t, eu1, eu2, us1)
	data := `"europe-west1=` + eu1 + `,` + eu2 + `;us-east1=` + us1 + `"`
	s := coretest.Start(t, `example.org:0 {
	bind 127.0.0.1
	`+webCheck("")+`
	routingpolicy example.org {
		region us-east1
		subnet europe-west1 127.0.92.0/24
		geo fenced A 30 `+data+` fence healthcheck web
		geo open A 30 `+data+` healthcheck web
	}
}`)
	euClient := "127.0.92.10"
	both := eu1 + " " + eu2
	waitFor(t, s, euClient, "fenced.example.org", both)

	web[eu1].ok.Store(false)
	waitFor(t, s, euClient, "fenced.example.org", eu2) // R-GEO-2: only healthy addresses
	web[eu2].ok.Store(false)
	waitFor(t, s, euClient, "open.example.org", us1) // R-GEO-4: next nearest location
	for range 50 {
		if got := ask(t, s, euClient, "fenced.example.org"); got != both {
			t.Fatalf("fenced answer with its location down = %q, want all of %q", got, both)
		}
	}
	web[eu1].ok.Store(true)
	waitFor(t, s, euClient, "fenced.example.org", eu1)
}

// Scenario 10 — a reload under steady load (the weights change): no query fails, and the health
// state survives (H-4): a backend that was unhealthy before the reload is not served after it, as
// it would be if its state restarted at unknown.
func TestScenarioReloadUnderLoad(t *testing.T) {
	a, b, down := "127.0.101.1", "127.0.101.2", "127.0.101.3"
	web := startBackends(t, a, b, down)
	corefile := func(wa, wb int) string {
		return fmt.Sprintf(`example.org:0 {
	bind 127.0.0.1
	%s
	routingpolicy example.org {
		wrr www A 30 "%d=%s;%d=%s;500=%s" healthcheck web
	}
}`, webCheck(""), wa, a, wb, b, down)
	}
	s := coretest.Start(t, corefile(50, 50))
	web[down].ok.Store(false)
	waitGone(t, s, "", "www.example.org", down)

	l := startLoad(s, "www.example.org", 4)
	for i := range 4 {
		if err := s.Reload(corefile(90-20*i, 10+20*i)); err != nil {
			t.Fatal(err)
		}
		if count := tally(t, s, "", "www.example.org", 200); count[down] != 0 {
			t.Fatalf("reload %d: the unhealthy backend was served %d times: state lost", i, count[down])
		}
	}
	sent, failed := l.finish()
	if failed != 0 || sent < 100 {
		t.Fatalf("under reloads: %d of %d queries failed", failed, sent)
	}
	// The last weights (30/70) are the ones served.
	count := tally(t, s, "", "www.example.org", 2000)
	lo, hi := sixSigma(2000, 0.7)
	if c := count[b]; c < lo || c > hi {
		t.Fatalf("after the last reload %s answered %d of 2000, want %d..%d", b, c, lo, hi)
	}
	if strings.Contains(fmt.Sprint(count), down) {
		t.Fatalf("unhealthy backend served: %v", count)
	}
}
