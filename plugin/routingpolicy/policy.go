package routingpolicy

import (
	"math"
	"math/bits"
	"strings"
	"sync/atomic"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// Kind is the routing policy of a record set.
type Kind uint8

// The policies a record set can carry.
const (
	Plain Kind = iota
	WRR
	Geo
	Failover
)

// String returns the policy name used in metadata, metrics and logs.
func (k Kind) String() string {
	switch k {
	case WRR:
		return "wrr"
	case Geo:
		return "geo"
	case Failover:
		return "failover"
	}
	return "plain"
}

// maxItems bounds the items of one policy, so a query can keep per-item health on the stack.
const maxItems = 128

// addr is one rdata of an item with the health target that decides whether it is served.
type addr struct {
	rr dns.RR
	// key is the board key of an A/AAAA address; explicit is set when the record set names a
	// check for it (the address is health-checked whatever the board says).
	key      health.Key
	hasKey   bool
	explicit bool
	t        *health.Target // set by acquire; nil means always healthy
}

// checked reports whether the address is health-checked: its record set names a check, or
// something publishes its derived state (a load-balancer VIP, a pschealth destination).
func (a *addr) checked() bool {
	if a.explicit {
		return true
	}
	return a.t != nil && a.t.Checked()
}

// ok reports whether the address may be served: unchecked addresses always are (R-GEO-3), checked
// ones when their target is healthy or not decided yet (H-2).
func (a *addr) ok() bool {
	if a.t == nil {
		return true
	}
	if !a.explicit && !a.t.Checked() {
		return true
	}
	return a.t.Healthy()
}

// item is one bucket (WRR), location (geo) or the primary set (failover).
type item struct {
	label  string // "0", "1"... for WRR, the region name for geo, "primary" for failover
	weight float64
	loc    region.ID
	addrs  []addr
	extra  []dns.RR // the in-zone addresses of MX/SRV targets, for the additional section
	target string   // a CNAME item's target, canonical, for the chase

	mdItem func() string                  // precomputed metadata value, so the query path does not allocate
	served *atomic.Pointer[cachedCounter] // a pointer, so items can be built by value
}

// healthy reports whether at least one address of it may be served.
func (it *item) healthy() bool {
	for i := range it.addrs {
		if it.addrs[i].ok() {
			return true
		}
	}
	return false
}

// appendRRs appends the servable records of it (all of them when all is set) to dst in random
// order (R-WRR-2).
func (it *item) appendRRs(dst []dns.RR, all bool, rnd func() uint64) []dns.RR {
	start := len(dst)
	for i := range it.addrs {
		if all || it.addrs[i].ok() {
			dst = append(dst, it.addrs[i].rr)
		}
	}
	shuffle(dst[start:], rnd)
	return dst
}

func shuffle(s []dns.RR, rnd func() uint64) {
	for i := len(s) - 1; i > 0; i-- {
		j := below(rnd(), i+1)
		s[i], s[j] = s[j], s[i]
	}
}

// below maps a uniform 64-bit value to [0, n) for n > 0 (Lemire's multiply-high; the bias is
// below 2^-50 for the sizes we use). n is a length or count, so it is never negative, and the
// result is below n, so it fits in an int; below runs on every query, hence no runtime checks.
func below(r uint64, n int) int {
	hi, _ := bits.Mul64(r, uint64(n)) //nolint:gosec // n is a length or count, never negative
	return int(hi)                    //nolint:gosec // hi < n, which is an int
}

// unit maps a uniform 64-bit value to [0, 1).
func unit(r uint64) float64 { return float64(r>>11) / (1 << 53) }

// policy is a record set with a routing policy, resolved at load time.
type policy struct {
	kind  Kind
	name  string // owner, lower case, fully qualified
	qtype uint16
	label string // "www.example.org./A" for metrics and logs

	items []item

	// geo: fence, and the order of items by distance for every source region (index id+1, so
	// region.None has a row).
	fence   bool
	nearest [][]uint8

	// failover: items[0] is the primary; backup is the geo policy behind it; trickle is the
	// share of queries sent to the backup while the primary is healthy (R-FO-3).
	backup  *policy
	trickle float64

	zone     string
	mdPolicy func() string
	failOpen atomic.Pointer[cachedCounter]
	fallback atomic.Pointer[cachedCounter]
}

// outcome is what a pick decided, for metadata, metrics and logs.
type outcome struct {
	it       *item
	failOpen bool
	fallback bool // geo answered from another location than the nearest (R-GEO-4)
	backup   bool // failover answered from the backup
}

// answer appends the records p serves for a query from src to dst.
func (p *policy) answer(dst []dns.RR, s *source, rnd func() uint64) ([]dns.RR, outcome) {
	switch p.kind {
	case WRR:
		it, all := p.pickWRR(rnd)
		return it.appendRRs(dst, all, rnd), outcome{it: it, failOpen: all && p.anyChecked()}
	case Geo:
		it, all, fb := p.pickGeo(s.region(), true)
		return it.appendRRs(dst, all, rnd), outcome{it: it, failOpen: all && !p.fence, fallback: fb}
	case Failover:
		it, all, o := p.pickFailover(s, rnd)
		o.it = it
		return it.appendRRs(dst, all, rnd), o
	}
	return dst, outcome{}
}

// anyChecked reports whether some address of p is health-checked; fail open only means something
// when one is.
func (p *policy) anyChecked() bool {
	for i := range p.items {
		for j := range p.items[i].addrs {
			if p.items[i].addrs[j].checked() {
				return true
			}
		}
	}
	return false
}

// pickWRR chooses one bucket (R-WRR-2). all is set when the bucket must be served whole because
// nothing is healthy (R-WRR-7).
func (p *policy) pickWRR(rnd func() uint64) (it *item, all bool) {
	var ok [maxItems]bool
	var total float64
	zeros := 0
	for i := range p.items {
		if !p.items[i].healthy() {
			continue // R-WRR-4: a bucket with no healthy address is not eligible.
		}
		ok[i] = true
		if p.items[i].weight > 0 {
			total += p.items[i].weight
		} else {
			zeros++
		}
	}
	switch {
	case total > 0:
		// R-WRR-2, R-WRR-4: weight / sum of eligible weights.
		return p.drawWeighted(ok[:len(p.items)], total, rnd), false
	case zeros > 0:
		// R-WRR-3: all weights 0 share evenly; R-WRR-5: zero-weight items answer only when every
		// non-zero item is unhealthy.
		return p.drawEven(ok[:len(p.items)], zeros, rnd), false
	}
	// R-WRR-6, R-WRR-7: everything unhealthy: answer as if everything were healthy, which never
	// picks a zero-weight item while a non-zero one exists.
	for i := range p.items {
		ok[i] = true
		total += p.items[i].weight
	}
	if total > 0 {
		return p.drawWeighted(ok[:len(p.items)], total, rnd), true
	}
	return p.drawEven(ok[:len(p.items)], len(p.items), rnd), true
}

func (p *policy) drawWeighted(ok []bool, total float64, rnd func() uint64) *item {
	x := unit(rnd()) * total
	last := -1
	for i := range p.items {
		w := p.items[i].weight
		if !ok[i] || w <= 0 {
			continue
		}
		last = i
		if x < w {
			return &p.items[i]
		}
		x -= w
	}
	return &p.items[last] // rounding at the top end
}

func (p *policy) drawEven(ok []bool, n int, rnd func() uint64) *item {
	k := below(rnd(), n)
	last := -1
	for i := range p.items {
		if !ok[i] || p.items[i].weight > 0 && n != len(p.items) {
			continue
		}
		if k == 0 {
			return &p.items[i]
		}
		k--
		last = i
	}
	return &p.items[last]
}

// order returns the items of a geo policy nearest first for src.
func (p *policy) order(src region.ID) []uint8 {
	i := int(src) + 1
	if i < 0 || i >= len(p.nearest) {
		i = 0
	}
	return p.nearest[i]
}

// pickGeo chooses the location for src (R-GEO-1..6). With failOpen unset it returns nil when
// no location can answer, so a failover can tell (R-FO-4).
func (p *policy) pickGeo(src region.ID, failOpen bool) (it *item, all, fallback bool) {
	order := p.order(src)
	for n, i := range order {
		c := &p.items[i]
		// R-GEO-2, R-GEO-3: the healthy addresses, unchecked ones counting as healthy; the
		// location answers while it has one.
		if c.healthy() {
			return c, false, n > 0
		}
		// R-GEO-5: fencing never leaves the location: serve all of it.
		if p.fence {
			return c, true, false
		}
		// R-GEO-4: all its addresses unhealthy: the next nearest location.
	}
	if !failOpen {
		return nil, false, false
	}
	// R-GEO-6: every location unhealthy: fail open to the nearest.
	return &p.items[order[0]], true, false
}

// pickFailover chooses between the primary set and the backup (R-FO-1..4).
func (p *policy) pickFailover(s *source, rnd func() uint64) (*item, bool, outcome) {
	primary := &p.items[0]
	// R-FO-3: the trickle share goes to the backup even while the primary is healthy. A backup
	// with nothing healthy does not take trickle traffic.
	trickle := p.trickle > 0 && (p.trickle >= 1 || unit(rnd()) < p.trickle)
	if trickle {
		if it, all, fb := p.backup.pickGeo(s.region(), false); it != nil && !all {
			return it, false, outcome{backup: true, fallback: fb}
		}
	}
	// R-FO-1: the healthy primary addresses.
	if primary.healthy() {
		return primary, false, outcome{}
	}
	// R-FO-2: the backup, by the geo rules. A fenced backup whose location has nothing healthy
	// counts as unhealthy here: the failover does not serve a dead location over the primary.
	if it, all, fb := p.backup.pickGeo(s.region(), false); it != nil && !all {
		return it, false, outcome{backup: true, fallback: fb}
	}
	// R-FO-4: both unhealthy: fail open, answering as if everything were healthy, trickle
	// included: a query the trickle sent to the backup gets the backup's nearest location.
	if trickle {
		return &p.backup.items[p.backup.order(s.region())[0]], true, outcome{backup: true, failOpen: true}
	}
	return primary, true, outcome{failOpen: true}
}

// itemIndex converts the index of an item of a policy to the uint8 stored in p.nearest. Parsing
// allows at most maxItems items, so it always fits; this runs at load time only.
func itemIndex(i int) uint8 {
	if i < 0 || i > math.MaxUint8 {
		panic("routingpolicy: item index out of range")
	}
	return uint8(i)
}

// buildNearest fills p.nearest from the locations of its items.
func (p *policy) buildNearest(t *region.Table, cache map[string][][]uint8) {
	locs := make([]region.ID, len(p.items))
	var kb strings.Builder
	for i := range p.items {
		locs[i] = p.items[i].loc
		kb.WriteString(p.items[i].label)
		kb.WriteByte(';')
	}
	key := kb.String()
	if n, ok := cache[key]; ok {
		p.nearest = n
		return
	}
	n := make([][]uint8, t.Len()+1)
	for id := -1; id < t.Len(); id++ {
		order := t.NearestFirst(region.ID(id), locs)
		row := make([]uint8, 0, len(order))
		// R-GEO-1: the item whose location equals the source region first, even when another
		// region has the same coordinates.
		for _, i := range order {
			if locs[i] == region.ID(id) {
				row = append(row, itemIndex(i))
			}
		}
		for _, i := range order {
			if locs[i] != region.ID(id) {
				row = append(row, itemIndex(i))
			}
		}
		n[id+1] = row
	}
	cache[key] = n
	p.nearest = n
}
