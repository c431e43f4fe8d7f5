package region

import (
	"fmt"
	"sort"
	"strings"
)

// unknownError is the error for a region name the table does not have; it lists the nearest
// spellings so a typo is fixed at once.
func (t *Table) unknownError(name string) error {
	type cand struct {
		name string
		d    int
	}
	cands := make([]cand, 0, len(t.names))
	for _, n := range t.names {
		cands = append(cands, cand{n, editDistance(name, n)})
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].d < cands[j].d })
	n := min(3, len(cands))
	near := make([]string, 0, n)
	for _, c := range cands[:n] {
		near = append(near, c.name)
	}
	return fmt.Errorf("unknown region %q (did you mean %s? add it with 'coordinates %s LAT LON')",
		name, strings.Join(near, ", "), name)
}

// editDistance is the optimal-string-alignment distance between a and b: insertions, deletions,
// substitutions and swaps of two neighbouring letters (the usual typo) each cost 1.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Resolve returns the ID of name, or an error that lists the nearest spellings.
func (t *Table) Resolve(name string) (ID, error) {
	if id, ok := t.byName[name]; ok {
		return id, nil
	}
	return None, t.unknownError(name)
}
