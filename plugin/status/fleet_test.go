package status

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/coretest"
	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
	"github.com/coresteer/coresteer/plugin/pkg/freeport"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// fleetCorefile is the Corefile of every replica of the fleet test: its name, region and ports
// come from the environment, as in deploy/kubernetes.
func fleetCorefile(etcd, port string) string {
	return fmt.Sprintf(`steer.test:{$DNSPORT} {
	bind {$ADDR}
	status {$ADDR}:{$STATUSPORT}
	healthcheck {
		check web {
			protocol http
			port %s
			path /
			interval 1s
			timeout 500ms
			healthy_threshold 2
			unhealthy_threshold 2
			prober {$REGION}
		}
		fleet etcd %s {
			prefix /test/status
			replica {$REPLICA}
			replicas_per_region 1
			timeout 1s
		}
	}
	routingpolicy {
		wrr www A 30 "1=127.0.78.1;1=127.0.78.2" healthcheck web
	}
}
`, port, etcd)
}

// fleetReplica is a replica process and the base URL of its status page.
type fleetReplica struct {
	*etcdtest.Replica
	base string
	logs *coretest.Log
}

func startFleetReplica(t *testing.T, name, region, corefile string) *fleetReplica {
	t.Helper()
	addr := etcdtest.ReplicaAddr(92) // the healthcheck tests use 91
	port, err := freeport.On(addr)
	if err != nil {
		t.Fatal(err)
	}
	fr := &fleetReplica{base: "http://" + net.JoinHostPort(addr, port), logs: &coretest.Log{}}
	r, err := etcdtest.StartReplica(name, addr, corefile, []string{"-test.run=^$"}, []string{"REGION=" + region, "STATUSPORT=" + port}, fr.logs)
	if err != nil {
		t.Fatalf("%v\n%s", err, fr.logs)
	}
	fr.Replica = r
	t.Cleanup(r.Stop)
	return fr
}

func (fr *fleetReplica) fleet(t *testing.T) statusview.Fleet {
	t.Helper()
	var f statusview.Fleet
	getJSON(t, fr.base+"/status.json?section=fleet", &f)
	return f
}

// F-1, F-2, F-3 on the status page (S-1): three replicas in their own processes (a and b in
// us-east1, c in europe-west1, replicas_per_region 1) against a real etcd. Each one's
// /status.json lists the three members with their regions and live leases, itself, the mode
// (shared), and for each target the one member of each region that probes it, the same on every
// replica; a target's verdict is the fleet's, with the published prober states it comes from
// rather than this replica's own streak. The page, in a real browser, has the fleet section.
// When etcd stops, the page says fallback and why, and the verdicts are local again (F-4).
func TestStatusFleetView(t *testing.T) {
	etcd := etcdtest.New(t)
	port, _ := startBackends(t, "127.0.78.1", "127.0.78.2")
	cf := fleetCorefile(etcd.Endpoint, port)
	a := startFleetReplica(t, "a", "us-east1", cf)
	b := startFleetReplica(t, "b", "us-east1", cf)
	c := startFleetReplica(t, "c", "europe-west1", cf)
	rs := []*fleetReplica{a, b, c}

	var views []statusview.Fleet
	// "probed here" is the last round's: the fleet's verdict comes at the switch, the sharded
	// rounds after it, so the page is read once a round planned in shared mode ran everywhere.
	waitFor(t, "every replica's page in shared mode with three members and both targets", func() bool {
		views = views[:0]
		for _, r := range rs {
			f := r.fleet(t)
			if f.Mode != "shared" || len(f.Members) != 3 || len(f.Probes) != 2 {
				return false
			}
			for _, p := range f.Probes {
				if p.Verdict != "fleet" || len(p.Regions) != 1 || len(p.Regions[0].Members) != 1 ||
					p.Regions[0].Here != (p.Regions[0].Members[0] == r.Name) {
					return false
				}
			}
			views = append(views, f)
		}
		return true
	})
	regions := map[string]string{"a": "us-east1", "b": "us-east1", "c": "europe-west1"}
	for i, f := range views {
		me := rs[i].Name
		if !f.Enabled || f.Self != me || f.ReplicasPerRegion != 1 || f.Prefix != "/test/status" || f.Why != "" || f.Heard.IsZero() {
			t.Errorf("%s: fleet view %+v", me, f)
		}
		for _, m := range f.Members {
			if !slices.Equal(m.Regions, []string{regions[m.Name]}) || !m.LeaseAlive || m.Self != (m.Name == me) {
				t.Errorf("%s: member %+v", me, m)
			}
		}
		for j, p := range f.Probes {
			if p.Check != "web" || p.Target != "127.0.78."+fmt.Sprint(j+1)+":"+port || len(p.Regions) != 1 {
				t.Fatalf("%s: probe %+v", me, p)
			}
			reg := p.Regions[0]
			want := regions[me]
			if reg.Region != want || len(reg.Members) != 1 || regions[reg.Members[0]] != want {
				t.Errorf("%s: %s is probed from %+v, want one member of %s", me, p.Target, reg, want)
			}
			if reg.Here != (reg.Members[0] == me) {
				t.Errorf("%s: %s from %s by %v, probed here %v", me, p.Target, reg.Region, reg.Members, reg.Here)
			}
		}
	}
	// F-2: a and b make the same choice for us-east1.
	if !slices.EqualFunc(views[0].Probes, views[1].Probes, func(x, y statusview.FleetProbe) bool {
		return x.Target == y.Target && slices.Equal(x.Regions[0].Members, y.Regions[0].Members)
	}) {
		t.Errorf("a and b disagree on who probes what: %+v / %+v", views[0].Probes, views[1].Probes)
	}

	// The targets: the fleet decides, from the published states of one us-east1 member and c.
	var targets []statusview.Target
	waitFor(t, "c's targets decided by the fleet from both regions' states", func() bool {
		targets = nil
		getJSON(t, c.base+"/status.json?section=targets", &targets)
		for _, tg := range targets {
			if tg.Check == "web" && (tg.Probe == nil || tg.Probe.Decides != "fleet" || len(tg.Probe.Shared) != 2) {
				return false
			}
		}
		return len(targets) == 2
	})
	for _, tg := range targets {
		p := tg.Probe
		if tg.State != "healthy" || !strings.HasPrefix(tg.Reason, "fleet: 2/2 regions healthy") ||
			!strings.Contains(p.Progress, "the fleet decides") || !strings.HasSuffix(p.Progress, "2/2 regions healthy") {
			t.Errorf("%s: %s (%s), progress %q", tg.Address, tg.State, tg.Reason, p.Progress)
		}
		for _, s := range p.Shared {
			if s.Member == "" || regions[s.Member] != s.Region || s.Healthy != 1 || s.Decided != 1 || !s.Counts {
				t.Errorf("%s: shared state %+v", tg.Address, s)
			}
		}
	}

	// The page in a real browser has the fleet section with the members and who probes what.
	dom := dumpDOM(t, a.base+"/")
	for _, want := range []string{`id="fleet-members"`, `id="fleet-probes"`, "shared: the fleet's results decide", "europe-west1", "127.0.78.2:" + port, "(this replica)", "probers healthy"} {
		if !strings.Contains(dom, want) {
			t.Errorf("a's page lacks %q", want)
		}
	}
	if strings.Contains(dom, "fleet off") {
		t.Error("a's page says fleet off")
	}

	// F-4: etcd stops. The page says fallback, why, and that the leases are not known.
	etcd.Stop()
	var f statusview.Fleet
	waitFor(t, "a's page in fallback", func() bool {
		f = a.fleet(t)
		return f.Mode == "fallback"
	})
	if !strings.Contains(f.Why, "etcd unreachable") {
		t.Errorf("fallback because %q, want etcd unreachable", f.Why)
	}
	for _, m := range f.Members {
		if m.LeaseAlive {
			t.Errorf("member %s alive while etcd is unreachable", m.Name)
		}
	}
	waitFor(t, "a's verdicts local", func() bool {
		f = a.fleet(t)
		for _, p := range f.Probes {
			if p.Verdict != "local" || !p.Regions[0].Here {
				return false
			}
		}
		return len(f.Probes) == 2
	})
	_, page := get(t, a.base+"/")
	if !strings.Contains(page, "fallback: probing every target and deciding alone") || !strings.Contains(page, "etcd unreachable") {
		t.Errorf("a's page does not say fallback:\n%s", page)
	}
}
