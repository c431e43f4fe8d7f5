package healthcheck

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// The layout of a fleet's keys under its prefix:
//
//	PREFIX/members/REPLICA                         {"nonce":..., "checks":{"web":["us-east1"]}}
//	PREFIX/results/CHECK/TARGET/REGION/REPLICA     {"nonce":...,"healthy":1,"decided":2,"failure":"status 503"}
//
// Both live under the replica's lease (F-1, F-3), and both carry the nonce of the process that
// wrote them: a result counts only while its nonce is the one its replica's member key has, so a
// restarted replica of the same name never counts its predecessor's results as its own. TARGET is ADDRESS:PORT ([v6]:PORT); check,
// region and replica names have no '/' (parse refuses a region with one in a fleet).
const (
	membersDir = "/members/"
	resultsDir = "/results/"
)

// pairKey is a (check, target) in the fleet's keys.
type pairKey struct{ check, target string }

// resultKey is one published result: a (check, target) seen from one region by this replica.
type resultKey struct {
	pair   pairKey
	region string
}

func memberKey(prefix, replica string) string { return prefix + membersDir + replica }

func (k resultKey) key(prefix, replica string) string {
	return prefix + resultsDir + k.pair.check + "/" + k.pair.target + "/" + k.region + "/" + replica
}

// memberValue is what a replica registers: the prober regions of each of its checks. The nonce
// is its process's: a member key with this process's nonce is this process's own.
type memberValue struct {
	Nonce  string              `json:"nonce"`
	Checks map[string][]string `json:"checks"`
}

// resultValue is what a replica publishes of one (check, target) and one region (F-3): the
// states of its probers there, each the thresholds applied to that prober's own results
// (verdict.go): how many are healthy, how many have a state, and why the first unhealthy one is.
// A state changes only as often as the thresholds let it, so etcd's write load follows state
// changes, not rounds.
type resultValue struct {
	Nonce   string `json:"nonce"`
	Healthy int    `json:"healthy"`
	Decided int    `json:"decided"`
	Failure string `json:"failure,omitempty"`
}

func encodeResult(t tally) string {
	b, _ := json.Marshal(resultValue{Nonce: processNonce, Healthy: t.ok, Decided: t.got, Failure: t.failure})
	return string(b)
}

// slot is one member's tally of one region, with the nonce of the process that wrote it.
type slot struct {
	member string
	nonce  string
	tally  tally
}

// mirror is this replica's copy of the fleet's keys, fed by the list and the watch.
type mirror struct {
	members map[string]memberValue
	// probers lists, by check and region, the members that probe from there, sorted.
	probers map[string][]string
	results map[pairKey][]slot // sorted by region, then member
}

func newMirror() mirror {
	return mirror{members: make(map[string]memberValue), probers: make(map[string][]string), results: make(map[pairKey][]slot)}
}

func proberKey(check, region string) string { return check + "\x00" + region }

// change is what one put or delete did to the mirror.
type change struct {
	replica string
	member  bool    // the key is a member's
	result  bool    // the key is a result's (whatever its value)
	members bool    // the members or their regions changed
	pair    pairKey // the (check, target) of a result key
	region  string  // and its region
}

// apply records a put (value != nil) or a delete of key. A result key whose value cannot be read
// is recorded as holding no result, and reported both as a change (result set) and as an error;
// any other error is a key outside the layout, which changed nothing.
func (m *mirror) apply(prefix, key string, value []byte) (change, error) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return change{}, fmt.Errorf("key %q outside the prefix", key)
	}
	if name, ok := strings.CutPrefix(rest, membersDir); ok {
		return change{replica: name, member: true, members: m.applyMember(name, value)}, nil
	}
	if r, ok := strings.CutPrefix(rest, resultsDir); ok {
		parts := strings.Split(r, "/")
		if len(parts) != 4 {
			return change{}, fmt.Errorf("result key %q: want CHECK/TARGET/REGION/REPLICA", key)
		}
		k := resultKey{pair: pairKey{check: parts[0], target: parts[1]}, region: parts[2]}
		c := change{replica: parts[3], result: true, pair: k.pair, region: k.region}
		if value == nil {
			m.deleteResult(k, parts[3])
			return c, nil
		}
		var v resultValue
		if err := json.Unmarshal(value, &v); err != nil || v.Healthy < 0 || v.Decided < v.Healthy || v.Decided > maxProbers {
			// The key now holds what no replica can read: it counts as no result, here as on a
			// replica that lists the keys now (F-3), not as the value it held before.
			m.deleteResult(k, parts[3])
			return c, fmt.Errorf("result %q: bad value %q (want JSON with 0 <= healthy <= decided <= %d)", key, value, maxProbers)
		}
		m.putResult(k, slot{member: parts[3], nonce: v.Nonce, tally: tally{region: parts[2], ok: v.Healthy, got: v.Decided, failure: v.Failure}})
		return c, nil
	}
	return change{}, fmt.Errorf("key %q: neither a member nor a result", key)
}

// applyMember records a member's registration, or its leaving when value is nil, and reports
// whether the members, their regions or their processes (nonces) changed.
func (m *mirror) applyMember(name string, value []byte) bool {
	old, had := m.members[name]
	if value == nil {
		if !had {
			return false
		}
		delete(m.members, name)
	} else {
		var v memberValue
		if err := json.Unmarshal(value, &v); err != nil {
			v = memberValue{} // a member we cannot read probes nothing
		}
		if had && old.Nonce == v.Nonce && sameChecks(old.Checks, v.Checks) {
			m.members[name] = v
			return false
		}
		m.members[name] = v
	}
	m.index()
	return true
}

func sameChecks(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// index rebuilds probers from members.
func (m *mirror) index() {
	clear(m.probers)
	for name, v := range m.members {
		for check, regions := range v.Checks {
			for _, r := range regions {
				k := proberKey(check, r)
				m.probers[k] = append(m.probers[k], name)
			}
		}
	}
	// A member value written by hand may name a region twice; F-2's rendezvous must count each
	// member once.
	for k, names := range m.probers {
		sort.Strings(names)
		m.probers[k] = slices.Compact(names)
	}
}

func (m *mirror) putResult(k resultKey, s slot) {
	ss := m.results[k.pair]
	i, found := slices.BinarySearchFunc(ss, s, cmpSlot)
	if found {
		ss[i] = s
		return
	}
	m.results[k.pair] = slices.Insert(ss, i, s)
}

func (m *mirror) deleteResult(k resultKey, member string) {
	ss := m.results[k.pair]
	i, found := slices.BinarySearchFunc(ss, slot{member: member, tally: tally{region: k.region}}, cmpSlot)
	if !found {
		return
	}
	if ss = slices.Delete(ss, i, i+1); len(ss) == 0 {
		delete(m.results, k.pair)
		return
	}
	m.results[k.pair] = ss
}

// held returns what member's key k holds, as the mirror last saw it, when the process of nonce
// wrote it: false when it holds nothing readable, or another process's result.
func (m *mirror) held(k resultKey, member, nonce string) (tally, bool) {
	ss := m.results[k.pair]
	i, found := slices.BinarySearchFunc(ss, slot{member: member, tally: tally{region: k.region}}, cmpSlot)
	if !found || ss[i].nonce != nonce {
		return tally{}, false
	}
	return ss[i].tally, true
}

func cmpSlot(a, b slot) int {
	if c := strings.Compare(a.tally.region, b.tally.region); c != 0 {
		return c
	}
	return strings.Compare(a.member, b.member)
}

// counts reports whether s counts in the tallies of check: its member currently registers the
// check from the slot's region, and the slot was written by that member's current process.
func (m *mirror) counts(s slot, check string) bool {
	v, ok := m.members[s.member]
	return ok && v.Nonce == s.nonce && slices.Contains(v.Checks[check], s.tally.region)
}

// tallies adds up, region by region, the prober states every member published about pair: HC-2
// then counts every prober of the fleet in each region (F-3). It reads the mirror and nothing
// else, this replica's own results included (as etcd holds them, not as they are about to be),
// so replicas whose mirrors hold the same keys compute the same tallies. Only a member that
// currently registers the check from that region counts there, so a region a reload removed, or
// a replica that left, stops counting at once. The order, by region and then member, is the same
// on every replica, so the same keys give the same verdict and the same reason.
func (m *mirror) tallies(pair pairKey) []tally {
	var out []tally
	for _, s := range m.results[pair] { // sorted by region, then member
		if !m.counts(s, pair.check) {
			continue
		}
		if n := len(out); n > 0 && out[n-1].region == s.tally.region {
			t := &out[n-1]
			t.ok += s.tally.ok
			t.got += s.tally.got
			if t.failure == "" {
				t.failure = s.tally.failure
			}
			continue
		}
		out = append(out, s.tally)
	}
	return out
}

// describe lists the members and their prober regions for the log line of a change.
func (m *mirror) describe() string {
	names := make([]string, 0, len(m.members))
	for n := range m.members {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", n, strings.Join(m.regions(n), " "))
	}
	return b.String()
}

// regions are the prober regions member registers over all its checks, sorted.
func (m *mirror) regions(member string) []string {
	regions := []string{}
	for _, rs := range m.members[member].Checks {
		for _, r := range rs {
			if !slices.Contains(regions, r) {
				regions = append(regions, r)
			}
		}
	}
	sort.Strings(regions)
	return regions
}
