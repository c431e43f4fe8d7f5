package healthcheck

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/etcdtest"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"
)

// F-2: who the status page says probes a key is exactly the members for which chosen is true,
// whatever the members, the key and replicas_per_region.
func TestChoosersAreChosenF2(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		members := make([]string, rng.IntN(8))
		for j := range members {
			members[j] = fmt.Sprintf("r%d", rng.IntN(20))
		}
		slices.Sort(members)
		members = slices.Compact(members)
		key := fmt.Sprintf("web|127.0.0.%d:80|us-east1", i)
		n := 1 + rng.IntN(3)
		got := choosers(members, key, n)
		var want []string
		for _, m := range members {
			if chosen(members, m, key, n) {
				want = append(want, m)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("members %v key %s n %d: choosers %v, chosen %v", members, key, n, got, want)
		}
	}
}

// statusOf is what replica rp's status page shows of its fleet and its first target.
func statusOf(rp *replica) statusview.View {
	var v statusview.View
	rp.f.show(&v.Fleet, 1)
	rp.reg.show(rp.run.check.Name, &v)
	v.Targets = []statusview.Target{{Key: rp.bts[0].Key().String()}}
	v.Finish()
	return v
}

// S-1 with F-3 and F-4: a replica's status view says it warms up after joining, then that the
// fleet decides; the target's verdict is the fleet's and the view shows the published prober
// states it comes from (one unhealthy region of three), not this replica's own streak, which
// with thresholds 5 would still say healthy. When etcd stops, it says why it falls back and the
// verdict is local again.
func TestFleetStatusViewF3F4(t *testing.T) {
	leakCheck(t)
	etcd := etcdtest.New(t)
	tg := netip.MustParseAddrPort("127.0.86.9:80")
	script := newRegionScript()
	script.set(tg, "us-east1", "europe-west1")
	iv, timeout := 2*time.Second, time.Second
	rs := threeRegions(t, etcd.Endpoint, "/test/statusview", iv, timeout, 5, script, tg)
	d := rs[2]
	warming := false
	var v statusview.View
	waitFor30(t, "d's view in shared mode", func() bool {
		v = statusOf(d)
		warming = warming || strings.HasPrefix(v.Fleet.Why, "warming up")
		return v.Fleet.Mode == "shared" && v.Targets[0].Probe.Decides == "fleet" && len(v.Targets[0].Probe.Shared) == 3
	})
	if !warming {
		t.Error("d never said it was warming up after joining")
	}
	f := v.Fleet
	if !f.Enabled || f.Self != "d" || f.Why != "" || len(f.Members) != 3 {
		t.Fatalf("d's fleet view: %+v", f)
	}
	for i, want := range []statusview.FleetMember{{Name: "a", Regions: []string{"us-east1"}}, {Name: "c", Regions: []string{"europe-west1"}}, {Name: "d", Regions: []string{"asia-east1"}, Self: true}} {
		m := f.Members[i]
		if m.Name != want.Name || !slices.Equal(m.Regions, want.Regions) || m.Self != want.Self || !m.LeaseAlive {
			t.Errorf("member %d: %+v, want %+v alive", i, m, want)
		}
	}
	if len(f.Probes) != 1 || f.Probes[0].Target != tg.String() || f.Probes[0].Verdict != "fleet" ||
		len(f.Probes[0].Regions) != 1 || !slices.Equal(f.Probes[0].Regions[0].Members, []string{"d"}) || !f.Probes[0].Regions[0].Here {
		t.Fatalf("who probes what: %+v", f.Probes)
	}
	p := v.Targets[0].Probe
	if !strings.HasPrefix(p.Progress, "the fleet decides") || !strings.Contains(p.Progress, "2/3 regions healthy") {
		t.Errorf("progress %q, want the fleet's verdict", p.Progress)
	}
	for _, s := range p.Shared {
		healthy := 1
		if s.Region == "asia-east1" {
			healthy = 0
			if s.Failure != "refused from asia-east1" {
				t.Errorf("asia-east1's state without its failure: %+v", s)
			}
		}
		if s.Healthy != healthy || s.Decided != 1 || !s.Counts {
			t.Errorf("published state %+v", s)
		}
	}

	etcd.Stop()
	waitUntil(t, staleWithin(timeout)+iv, "d's view in fallback with a local verdict", func() bool {
		v = statusOf(d)
		return v.Fleet.Mode == "fallback" && v.Targets[0].Probe.Decides == "local" && v.Fleet.Probes[0].Verdict == "local"
	})
	if !strings.HasPrefix(v.Fleet.Why, "etcd unreachable") || v.Fleet.Members[0].LeaseAlive {
		t.Errorf("fallback view: %+v", v.Fleet)
	}
	if strings.HasPrefix(v.Targets[0].Probe.Progress, "the fleet decides") {
		t.Errorf("progress %q after the fallback", v.Targets[0].Probe.Progress)
	}
}
