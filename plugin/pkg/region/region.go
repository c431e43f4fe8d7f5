// Package region holds the regions coresteer knows, their coordinates and the distance between
// them (L-3), the mapping of client addresses to regions (L-2) and the source address of a query
// (L-1). routingpolicy and outbound share it, and share its Corefile sub-directives.
package region

import (
	"maps"
	"math"
	"sort"
)

// Coord is a point on the earth in degrees.
type Coord struct {
	Lat, Lon float64
}

// ID identifies a region within one Table. None means no region.
type ID int16

// None is the ID of no region.
const None ID = -1

// Table is a set of named regions with coordinates, built once at load time. IDs index it, so
// lookups on the query path are slice reads.
type Table struct {
	names  []string
	coords []Coord
	byName map[string]ID
}

// NewTable returns the built-in regions with extra added or overriding built-in ones.
func NewTable(extra map[string]Coord) *Table {
	all := make(map[string]Coord, len(builtin)+len(extra))
	maps.Copy(all, builtin)
	maps.Copy(all, extra)
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	t := &Table{names: names, coords: make([]Coord, len(names)), byName: make(map[string]ID, len(names))}
	for i, n := range names {
		t.coords[i] = all[n]
		t.byName[n] = ID(i)
	}
	return t
}

// Lookup returns the ID of the region called name.
func (t *Table) Lookup(name string) (ID, bool) {
	id, ok := t.byName[name]
	return id, ok
}

// Name returns the name of id, or "" for None.
func (t *Table) Name(id ID) string {
	if id < 0 || int(id) >= len(t.names) {
		return ""
	}
	return t.names[id]
}

// Coord returns the coordinates of id.
func (t *Table) Coord(id ID) Coord { return t.coords[id] }

// Len returns the number of regions in t.
func (t *Table) Len() int { return len(t.names) }

const earthRadiusKm = 6371.0

// Distance returns the great-circle distance between a and b in kilometres (L-3). A distance to
// or from None is +Inf, so an unknown region sorts last.
func (t *Table) Distance(a, b ID) float64 {
	if a == None || b == None {
		return math.Inf(1)
	}
	if a == b {
		return 0
	}
	return greatCircle(t.coords[a], t.coords[b])
}

// greatCircle is the haversine distance between two points, in kilometres.
func greatCircle(p, q Coord) float64 {
	const rad = math.Pi / 180
	dLat := (q.Lat - p.Lat) * rad
	dLon := (q.Lon - p.Lon) * rad
	h := math.Sin(dLat/2)*math.Sin(dLat/2) +
		math.Cos(p.Lat*rad)*math.Cos(q.Lat*rad)*math.Sin(dLon/2)*math.Sin(dLon/2)
	return 2 * earthRadiusKm * math.Asin(math.Min(1, math.Sqrt(h)))
}

// NearestFirst returns the indexes of candidates ordered by distance from from, nearest first;
// ties keep the order of candidates. Consumers precompute this per source region at load time.
func (t *Table) NearestFirst(from ID, candidates []ID) []int {
	order := make([]int, len(candidates))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		return t.Distance(from, candidates[order[i]]) < t.Distance(from, candidates[order[j]])
	})
	return order
}
