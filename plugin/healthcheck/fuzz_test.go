package healthcheck

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/readme"
)

// FuzzParse: a healthcheck block either fails with an error that says where (Testfile:LINE, the
// line of the property) or once per server block, or gives checks and load balancers that keep
// every rule parse enforces: a valid unique name, a port, an interval of 1s..300s (HC-1) above
// a positive timeout, thresholds and probers in range, at least one prober region (HC-2), HTTP
// properties on HTTP checks only, tls_verify on HTTPS only, unique VIPs whose backends name a
// check and whose threshold is a percentage (HC-4). Seeds: every README example and the shapes of
// the setup tests.
func FuzzParse(f *testing.F) {
	blocks, err := readme.Directive("README.md", "healthcheck")
	if err != nil || len(blocks) == 0 {
		f.Fatalf("README blocks: %v", err)
	}
	for _, s := range append(blocks,
		"healthcheck {\ncheck web {\nprotocol https\nport 443\nprober us-east1 127.0.0.2\n}\n}",
		"healthcheck {\nloadbalancer 10.0.0.1 {\nbackends 10.0.0.2 [::1]:80\ncheck web\nthreshold 50%\n}\ncheck web\n}",
		"healthcheck {\ncheck web {\n{\n}\n}",
		"healthcheck {\ncheck",
		"healthcheck {\ncoordinates x 1 2\nlog\nready_wait off\n}",
		"healthcheck {\ncheck web\nfleet etcd http://127.0.0.1:2379 {\nprefix /a\nreplica r1\nreplicas_per_region 1\ntimeout 1s\ncredentials u p\n}\n}",
		"healthcheck {\ncheck h {\nprotocol http\npath /healthz\nhost www.example.org\ncontent ok\ninterval 10s\ntimeout 2s\nhealthy_threshold 3\nunhealthy_threshold 1\nprober us-east1 10.0.0.1\nprober us-east1 10.0.0.2\nprober edge\nprobers_per_region 3\n}\ncoordinates edge 10 20\n}",
		"healthcheck {\ncheck s {\nprotocol https\ntls_verify\ntimeout 30s\ninterval 300s\n}\n}",
		"healthcheck\nhealthcheck",
	) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		cfg, err := parse(caddy.NewTestController("dns", in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "Testfile:") && !errors.Is(err, plugin.ErrOnce) {
				t.Fatalf("%q: the error %q does not say where", in, err)
			}
			return
		}
		fail := func(what string, args ...any) {
			t.Helper()
			t.Fatalf("%q parsed, but "+what, append([]any{in}, args...)...)
		}
		names := map[string]bool{}
		for _, ch := range cfg.checks {
			switch {
			case !checkName.MatchString(ch.Name) || names[ch.Name]:
				fail("with the check name %q", ch.Name)
			case ch.Port == 0:
				fail("with port 0")
			case ch.Interval < minInterval || ch.Interval > maxInterval || ch.Timeout <= 0 || ch.Timeout >= ch.Interval:
				fail("with interval %s and timeout %s (HC-1)", ch.Interval, ch.Timeout)
			case ch.HealthyThreshold < 1 || ch.HealthyThreshold > maxThreshold || ch.UnhealthyThreshold < 1 || ch.UnhealthyThreshold > maxThreshold:
				fail("with thresholds %d and %d", ch.HealthyThreshold, ch.UnhealthyThreshold)
			case len(ch.Regions) == 0 || len(ch.Regions) > maxRegions || ch.ProbersPerRegion < 1 || ch.ProbersPerRegion > maxProbers:
				fail("with %d regions of %d probers (HC-2)", len(ch.Regions), ch.ProbersPerRegion)
			case ch.Protocol == TCP && (ch.Host != "" || ch.Content != "" || ch.Path != "/"):
				fail("with HTTP properties on a TCP check")
			case ch.TLSVerify && ch.Protocol != HTTPS:
				fail("with tls_verify on protocol %s", ch.Protocol)
			}
			names[ch.Name] = true
		}
		vips := map[string]bool{}
		for _, lb := range cfg.lbs {
			switch {
			case vips[lb.VIP.String()]:
				fail("with the loadbalancer %s twice", lb.VIP)
			case len(lb.Backends) > 0 && lb.Check == "":
				fail("with backends and no check (loadbalancer %s)", lb.VIP)
			case lb.Threshold < 0 || lb.Threshold > 100:
				fail("with threshold %d (HC-4)", lb.Threshold)
			}
			vips[lb.VIP.String()] = true
		}
	})
}

// FuzzFleetMirror: a replica's mirror of the fleet's keys is read from etcd, where any replica
// (or an operator with etcdctl) writes, so its input is anything. The input is a history of puts
// ("P KEY VALUE") and deletes ("D KEY"), one per line, under the prefix /p, applied as the watch
// applies them. Whatever it is, the mirror afterwards must be the one a replica that starts now
// builds from a list of the keys as they stand, in either order (F-3: replicas whose mirrors hold
// the same keys compute the same tallies), and its tallies must be sane: regions in order, once
// each, healthy <= decided, each prober list sorted and without repeats (F-2's rendezvous counts
// each member once).
func FuzzFleetMirror(f *testing.F) {
	member := `{"nonce":"n1","checks":{"web":["us-east1","eu-west1"]}}`
	result := `{"nonce":"n1","healthy":1,"decided":2,"failure":"status 503"}`
	for _, s := range []string{
		"P /p/members/a " + member + "\nP /p/results/web/10.0.0.1:80/us-east1/a " + result,
		"P /p/members/a " + member + "\nP /p/members/b {\"nonce\":\"n2\",\"checks\":{\"web\":[\"us-east1\"]}}\n" +
			"P /p/results/web/10.0.0.1:80/us-east1/a " + result + "\nP /p/results/web/10.0.0.1:80/us-east1/b {\"nonce\":\"n2\",\"healthy\":0,\"decided\":1}\nD /p/members/a",
		"P /p/results/web/[::1]:80/eu-west1/a " + result + "\nD /p/results/web/[::1]:80/eu-west1/a",
		"P /p/members/a {\"nonce\":\"n1\",\"checks\":{\"web\":[\"r\",\"r\"]}}",
		"P /p/results/web/t/r/a {\"nonce\":\"n1\",\"healthy\":3,\"decided\":2}",
		"P /p/results/web/t/r/a " + result + "\nP /p/results/web/t/r/a {\"nonce\":\"n1\",\"healthy\":-1}",
		"P /p/members/a not json\nP /x/members/b " + member + "\nP /p/results/a/b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, history string) {
		live := newMirror()
		keys := map[string]string{} // what etcd holds afterwards
		for line := range strings.Lines(history) {
			op, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
			key, value, _ := strings.Cut(rest, " ")
			switch op {
			case "P":
				// An empty value reaches the session as nil (etcd's protobuf), as a delete does.
				live.apply("/p", key, bytesOrNil(value)) //nolint:errcheck // the session logs and ignores it too
				keys[key] = value
			case "D":
				live.apply("/p", key, nil) //nolint:errcheck // as above
				delete(keys, key)
			}
		}
		sorted := slices.Sorted(maps.Keys(keys))
		listed := func(order []string) mirror {
			m := newMirror()
			for _, k := range order {
				m.apply("/p", k, bytesOrNil(keys[k])) //nolint:errcheck // as above
			}
			return m
		}
		forward := listed(sorted)
		slices.Reverse(sorted)
		backward := listed(sorted)
		for name, m := range map[string]mirror{"a list of the keys": forward, "the keys listed backwards": backward} {
			if !reflect.DeepEqual(live.members, m.members) {
				t.Fatalf("after %q the members are %v; %s gives %v", history, live.members, name, m.members)
			}
			if !maps.EqualFunc(live.probers, m.probers, slices.Equal) {
				t.Fatalf("after %q the probers are %v; %s gives %v", history, live.probers, name, m.probers)
			}
			if !maps.EqualFunc(live.results, m.results, slices.Equal) {
				t.Fatalf("after %q the results are %+v; %s gives %+v", history, live.results, name, m.results)
			}
		}
		for k, names := range live.probers {
			if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
				t.Fatalf("after %q the probers of %q are %v: not sorted, or a member twice (F-2)", history, k, names)
			}
		}
		for pair := range live.results {
			ts := live.tallies(pair)
			for i, tl := range ts {
				if i > 0 && ts[i-1].region >= tl.region {
					t.Fatalf("after %q the tallies of %v are %+v: regions out of order or twice", history, pair, ts)
				}
				if tl.ok < 0 || tl.ok > tl.got {
					t.Fatalf("after %q the tallies of %v are %+v: healthy outside 0..decided", history, pair, ts)
				}
			}
		}
	})
}

func bytesOrNil(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
