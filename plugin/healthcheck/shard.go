package healthcheck

import (
	"cmp"
	"slices"
	"strings"
)

// chosen reports whether me is one of the n members with the highest rendezvous score for key
// (F-2). Every replica computes it from the same member list, so they agree on who probes what
// without talking; when a member comes or goes, only the keys it wins or held move.
// Ties, which a 64-bit score makes all but impossible, go to the smaller name.
func chosen(members []string, me, key string, n int) bool {
	mine := score(me, key)
	found, higher := false, 0
	for _, m := range members {
		if m == me {
			found = true
			continue
		}
		if s := score(m, key); s > mine || (s == mine && m < me) {
			if higher++; higher >= n {
				return false
			}
		}
	}
	return found
}

// score is the rendezvous weight of member for key: FNV-1a over both, then a 64-bit finalizer
// (splitmix64), so similar names still spread evenly. It is the same on every replica and does
// not allocate.
func score(member, key string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := range len(member) {
		h = (h ^ uint64(member[i])) * prime
	}
	h *= prime // a zero byte between the two: ("ab", "c") and ("a", "bc") differ
	for i := range len(key) {
		h = (h ^ uint64(key[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// choosers returns the n members for which chosen is true for key, highest score first: who
// probes key (F-2), as every replica computes it, for the status page.
func choosers(members []string, key string, n int) []string {
	type scored struct {
		s uint64
		m string
	}
	xs := make([]scored, len(members))
	for i, m := range members {
		xs[i] = scored{score(m, key), m}
	}
	slices.SortFunc(xs, func(a, b scored) int {
		if c := cmp.Compare(b.s, a.s); c != 0 {
			return c
		}
		return strings.Compare(a.m, b.m)
	})
	out := make([]string, 0, min(n, len(xs)))
	for _, x := range xs[:min(n, len(xs))] {
		out = append(out, x.m)
	}
	return out
}
