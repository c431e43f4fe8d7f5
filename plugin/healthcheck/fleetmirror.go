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
//	PREFIX/results/CHECK/TARGET/REGION/REPLICA     {"ok":2,"got":3,"failure":"status 503"}
//
// Both live under the replica's lease (F-1, F-3). TARGET is ADDRESS:PORT ([v6]:PORT); check,
// region and replica names have no '/'.
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

// memberValue is what a replica registers: the prober regions of each of its checks.
type memberValue struct {
	Nonce  string              `json:"nonce"`
	Checks map[string][]string `json:"checks"`
}

// resultValue is a published tally (verdict.go). Only these fields are written, so a replica
// writes again only when what its probers saw changes.
type resultValue struct {
	OK      int    `json:"ok"`
	Got     int    `json:"got"`
	Failure string `json:"failure,omitempty"`
}

func encodeTally(t tally) string {
	b, _ := json.Marshal(resultValue{OK: t.ok, Got: t.got, Failure: t.failure})
	return string(b)
}

// slot is one member's tally of one region.
type slot struct {
	member string
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

// apply records a put (value != nil) or a delete of key. It reports what the key was: a member
// (and whether the member list or their regions changed) or a result, and its replica.
func (m *mirror) apply(prefix, key string, value []byte) (replica string, member, changed bool, err error) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", false, false, fmt.Errorf("key %q outside the prefix", key)
	}
	if name, ok := strings.CutPrefix(rest, membersDir); ok {
		return name, true, m.applyMember(name, value), nil
	}
	if r, ok := strings.CutPrefix(rest, resultsDir); ok {
		parts := strings.Split(r, "/")
		if len(parts) != 4 {
			return "", false, false, fmt.Errorf("result key %q: want CHECK/TARGET/REGION/REPLICA", key)
		}
		k := resultKey{pair: pairKey{check: parts[0], target: parts[1]}, region: parts[2]}
		if value == nil {
			m.deleteResult(k, parts[3])
			return parts[3], false, false, nil
		}
		var v resultValue
		if err := json.Unmarshal(value, &v); err != nil || v.OK < 0 || v.Got < v.OK {
			return parts[3], false, false, fmt.Errorf("result %q: bad value %q", key, value)
		}
		m.putResult(k, slot{member: parts[3], tally: tally{region: parts[2], ok: v.OK, got: v.Got, failure: v.Failure}})
		return parts[3], false, false, nil
	}
	return "", false, false, fmt.Errorf("key %q: neither a member nor a result", key)
}

// applyMember records a member's registration, or its leaving when value is nil, and reports
// whether the members or their regions changed.
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
		if had && sameChecks(old.Checks, v.Checks) {
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
	for _, names := range m.probers {
		sort.Strings(names)
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

func cmpSlot(a, b slot) int {
	if c := strings.Compare(a.tally.region, b.tally.region); c != 0 {
		return c
	}
	return strings.Compare(a.member, b.member)
}

// tallies adds up, region by region, what every member published about pair, with this
// replica's own tallies (me, the current round's) in place of its published ones: HC-2 then
// counts every prober of the fleet in each region (F-3). The order, by region and then member,
// is the same on every replica, so the same results give the same verdict and the same reason.
func (m *mirror) tallies(pair pairKey, me string, mine []tally) []tally {
	ss := m.results[pair]
	all := make([]slot, 0, len(ss)+len(mine))
	for _, s := range ss {
		if s.member != me {
			all = append(all, s)
		}
	}
	for _, t := range mine {
		all = append(all, slot{member: me, tally: t})
	}
	slices.SortFunc(all, cmpSlot)
	var out []tally
	for _, s := range all {
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
		var regions []string
		for _, rs := range m.members[n].Checks {
			for _, r := range rs {
				if !slices.Contains(regions, r) {
					regions = append(regions, r)
				}
			}
		}
		sort.Strings(regions)
		fmt.Fprintf(&b, "%s (%s)", n, strings.Join(regions, " "))
	}
	return b.String()
}
