package healthcheck

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// owners returns the members chosen for key.
func owners(members []string, key string, n int) []string {
	var out []string
	for _, m := range members {
		if chosen(members, m, key, n) {
			out = append(out, m)
		}
	}
	return out
}

// F-2: every key gets exactly n owners (all members when fewer), every member computes the same
// owners, and when a member leaves only the keys it owned move; when it comes back, only keys
// move to it.
func TestRendezvousF2(t *testing.T) {
	members := []string{"dns-a", "dns-b", "dns-c", "dns-d", "dns-e"}
	const keys = 2000
	for _, n := range []int{1, 2, 5, 7} {
		before := map[string][]string{}
		for i := range keys {
			k := fmt.Sprintf("web|10.0.%d.%d:80|us-east1", i/256, i%256)
			o := owners(members, k, n)
			if want := min(n, len(members)); len(o) != want {
				t.Fatalf("n=%d key %s: %d owners %v, want %d", n, k, len(o), o, want)
			}
			before[k] = o
		}
		// dns-c leaves: keys keep their other owners; only dns-c's places are taken.
		left := []string{"dns-a", "dns-b", "dns-d", "dns-e"}
		for k, o := range before {
			after := owners(left, k, n)
			for _, m := range o {
				if m != "dns-c" && !slices.Contains(after, m) {
					t.Fatalf("n=%d key %s: %s lost it when dns-c left (%v -> %v)", n, k, m, o, after)
				}
			}
		}
	}
	// Spread: with 5 members and n=1, each owns about a fifth of 2000 keys (400, sd 17.9); the
	// bounds 300..500 are more than 5 sd away.
	count := map[string]int{}
	for i := range keys {
		for _, m := range owners(members, fmt.Sprintf("web|10.1.%d.%d:80|europe-west1", i/256, i%256), 1) {
			count[m]++
		}
	}
	for _, m := range members {
		if count[m] < 300 || count[m] > 500 {
			t.Errorf("%s owns %d of %d keys, want 300..500", m, count[m], keys)
		}
	}
	if chosen(members, "not-a-member", "k", 5) {
		t.Error("a replica that is not a member of the region was chosen")
	}
}

// F-3, HC-2 over the fleet: the prober states of one region published by several replicas add
// up; only members that register the check from that region count there, and only the results
// their current process wrote (the nonce); the tallies are a function of the mirror alone (what
// etcd holds), so the order, the verdict and the reason are the same whichever replica computes
// them.
func TestMirrorTalliesF3(t *testing.T) {
	m := newMirror()
	apply := func(key, val string) {
		t.Helper()
		var v []byte
		if val != "" {
			v = []byte(val)
		}
		if _, err := m.apply("/p", key, v); err != nil {
			t.Fatal(err)
		}
	}
	member := func(name string, regions ...string) {
		t.Helper()
		b, _ := json.Marshal(memberValue{Nonce: name, Checks: map[string][]string{"web": regions}})
		apply("/p/members/"+name, string(b))
	}
	put := func(member, region, val string) {
		t.Helper()
		if val != "" {
			val = `{"nonce":"` + member + `",` + val[1:]
		}
		apply("/p/results/web/10.0.0.1:80/"+region+"/"+member, val)
	}
	for _, l := range []struct{ name, region string }{{"a", "us-east1"}, {"b", "us-east1"}, {"c", "us-east1"}, {"d", "europe-west1"}, {"e", "asia-east1"}} {
		member(l.name, l.region)
	}
	put("a", "us-east1", `{"healthy":1,"decided":1}`)
	put("b", "us-east1", `{"healthy":0,"decided":1,"failure":"timeout"}`)
	put("c", "us-east1", `{"healthy":1,"decided":1}`)
	put("d", "europe-west1", `{"healthy":0,"decided":3,"failure":"status 503"}`)
	put("e", "asia-east1", `{"healthy":2,"decided":3}`)
	pair := pairKey{check: "web", target: "10.0.0.1:80"}
	v := aggregate(m.tallies(pair))
	if v.outcome != success || v.healthyRegions != 2 || v.regions != 3 {
		t.Fatalf("verdict %+v from %+v", v, m.tallies(pair))
	}
	if want := (tally{region: "us-east1", ok: 2, got: 3, failure: "timeout"}); m.tallies(pair)[2] != want {
		t.Errorf("us-east1 %+v, want %+v", m.tallies(pair)[2], want)
	}
	// e's probers now say asia-east1 is down: the verdict changes when etcd (the mirror) says so.
	put("e", "asia-east1", `{"healthy":0,"decided":3,"failure":"refused"}`)
	v = aggregate(m.tallies(pair))
	if v.outcome != failure || v.healthyRegions != 1 || v.reason != "1/3 regions healthy (asia-east1: refused)" {
		t.Errorf("verdict %+v, want 1/3 regions healthy (asia-east1: refused)", v)
	}
	// A result written by another process of the same name (a predecessor, its lease not yet
	// expired) does not count as the current member's.
	apply("/p/results/web/10.0.0.1:80/us-east1/c", `{"nonce":"old","healthy":0,"decided":5}`)
	if ts := m.tallies(pair); ts[2] != (tally{region: "us-east1", ok: 1, got: 2, failure: "timeout"}) {
		t.Errorf("with c's predecessor's result: us-east1 %+v, want a's and b's only", ts[2])
	}
	put("c", "us-east1", `{"healthy":1,"decided":1}`)
	// A deleted result no longer counts.
	put("d", "europe-west1", "")
	if v := aggregate(m.tallies(pair)); v.regions != 2 {
		t.Errorf("after the delete: %d regions, want 2", v.regions)
	}
	// A member that no longer registers asia-east1 (a reload dropped it), or that left, no
	// longer counts there, whatever its key still says.
	member("e", "europe-west1")
	if v := aggregate(m.tallies(pair)); v.regions != 1 {
		t.Errorf("after e dropped asia-east1: %d regions, want 1", v.regions)
	}
	apply("/p/members/b", "")
	if ts := m.tallies(pair); len(ts) != 1 || ts[0] != (tally{region: "us-east1", ok: 2, got: 2}) {
		t.Errorf("after b left: %+v, want us-east1 2/2", ts)
	}
	for _, bad := range []struct{ key, val string }{
		{"/p/results/web/x", `{}`},
		{"/p/results/web/10.0.0.1:80/r/m", `{"healthy":2,"decided":1}`},
		{"/p/results/web/10.0.0.1:80/r/m", `{"healthy":-1,"decided":1}`},
		{"/p/other/x", `{}`},
		{"/q/members/x", `{}`},
	} {
		if _, err := m.apply("/p", bad.key, []byte(bad.val)); err == nil {
			t.Errorf("%s %s accepted", bad.key, bad.val)
		}
	}
}

// F-3: a result key whose value no replica can read (bad JSON, healthy outside 0..decided, more
// probers than a region has) counts as no result, not as the value it held before: a replica
// that lists the keys now does not see the old value either, and the same keys must give the
// same tallies. F-2: a member value that names a region twice counts the member once in the
// rendezvous. (Both found by FuzzFleetMirror.)
func TestMirrorUnreadableValuesF2F3(t *testing.T) {
	const key = "/p/results/web/10.0.0.1:80/us-east1/a"
	pair := pairKey{check: "web", target: "10.0.0.1:80"}
	for _, bad := range []string{`not json`, `{"nonce":"a","healthy":-1,"decided":1}`, `{"nonce":"a","healthy":2,"decided":1}`, `{"nonce":"a","healthy":11,"decided":11}`} {
		m := newMirror()
		if _, err := m.apply("/p", "/p/members/a", []byte(`{"nonce":"a","checks":{"web":["us-east1","us-east1"]}}`)); err != nil {
			t.Fatal(err)
		}
		if got := m.probers[proberKey("web", "us-east1")]; !slices.Equal(got, []string{"a"}) {
			t.Errorf("probers of us-east1 %v, want [a] once (F-2)", got)
		}
		if _, err := m.apply("/p", key, []byte(`{"nonce":"a","healthy":1,"decided":1}`)); err != nil {
			t.Fatal(err)
		}
		if n := len(m.tallies(pair)); n != 1 {
			t.Fatalf("%d tallies, want 1", n)
		}
		c, err := m.apply("/p", key, []byte(bad))
		if err == nil || !strings.Contains(err.Error(), "bad value") {
			t.Errorf("%s: error %v, want one saying the value is bad", bad, err)
		}
		if c.pair != pair || c.replica != "a" {
			t.Errorf("%s: change %+v, want the pair and replica of the key (decided again, written back)", bad, c)
		}
		if ts := m.tallies(pair); len(ts) != 0 || len(m.results) != 0 {
			t.Errorf("%s: tallies %+v after the overwrite, want none (F-3)", bad, ts)
		}
	}
}
