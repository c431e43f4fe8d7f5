package routingpolicy

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/region"

	"github.com/miekg/dns"
)

// setSpec is a record set with a policy as configured (inline or from a recordsets file),
// before it is checked and resolved.
type setSpec struct {
	kind    Kind
	name    string // fully qualified, lower case
	qtype   uint16
	ttl     uint32
	items   []itemSpec
	fence   bool
	trickle float64
	backup  []itemSpec // failover: the geo backup
	check   string     // the healthcheck check named by the record set
	// endpoints, when not nil, are the addresses the check applies to (the API format's
	// healthCheckedTargets.externalEndpoints); nil means every address of the set.
	endpoints map[netip.Addr]bool
	origin    string // where it was defined, for errors: "Corefile" or a file name
	rdOrigin  string // the origin relative names in rdata are completed with; "": none allowed
}

// itemSpec is one item of a setSpec.
type itemSpec struct {
	weight   float64
	location string
	rdata    []string
}

func (s *setSpec) String() string {
	return s.name + "/" + dns.TypeToString[s.qtype]
}

// loadErr is an error about one record set.
func (s *setSpec) errf(format string, args ...any) error {
	return fmt.Errorf("%s %s (%s): %s", s.kind, s, s.origin, fmt.Sprintf(format, args...))
}

// policyTypes are the types a policy may carry; only A and AAAA can be health-checked.
var policyTypes = map[uint16]bool{
	dns.TypeA: true, dns.TypeAAAA: true, dns.TypeCNAME: true, dns.TypeMX: true, dns.TypeSRV: true, dns.TypeTXT: true,
}

// build turns records and record sets into zones. It is the single place where configuration
// errors about data are found, for inline data and files alike (R-ZONE-3).
func build(origins []string, loc *region.Locator, srcs []recordSource, sets []*setSpec, now time.Time) (*data, error) {
	d := &data{}
	for _, o := range origins {
		z := &zone{origin: o, names: make(map[string]*node)}
		for _, p := range origins {
			if p != o && inZone(p, o) {
				z.inner = append(z.inner, p)
			}
		}
		d.zones = append(d.zones, z)
	}
	nodeOf := func(z *zone, name string) *node {
		n := z.names[name]
		if n == nil {
			n = &node{name: name}
			z.names[name] = n
		}
		return n
	}

	// Plain records, grouped by name and type.
	for src, rr := range allRecords(srcs) {
		h := rr.Header()
		h.Name = canonicalName(h.Name)
		if h.Class != dns.ClassINET {
			// RFC 1035 5.2: the records of a zone have one class; the zones are served in IN.
			return nil, fmt.Errorf("record %q: class %s: only class IN is served", rr.String(), dns.Class(h.Class))
		}
		z := d.match(h.Name)
		if z == nil {
			return nil, fmt.Errorf("record %q: name %s is outside the zones %v", rr.String(), h.Name, origins)
		}
		if err := packable(rr); err != nil {
			return nil, fmt.Errorf("record %q: %v", rr.String(), err)
		}
		lowerTargets(rr)
		n := nodeOf(z, h.Name)
		s := n.find(h.Rrtype)
		if s == nil {
			n.add(rrset{qtype: h.Rrtype})
			s = &n.sets[len(n.sets)-1]
		}
		if slices.ContainsFunc(s.rrs, func(o dns.RR) bool { return dns.IsDuplicate(o, rr) }) {
			// RFC 2181 5: a duplicate record is suppressed (file serves every copy).
			log.Warningf("Record %q from %s is given twice: dropped (RFC 2181 5)", rr.String(), src.name)
			continue
		}
		switch h.Rrtype {
		case dns.TypeRRSIG, dns.TypeNSEC, dns.TypeNSEC3, dns.TypeNSEC3PARAM:
			// Served as plain data they would answer DO queries unsigned: refuse instead.
			return nil, fmt.Errorf("record %q: signed zone data is not supported (sign with the dnssec plugin instead)", rr.String())
		case dns.TypeSOA:
			if len(s.rrs) > 0 {
				return nil, fmt.Errorf("second SOA record %q for %s", rr.String(), h.Name)
			}
			if h.Name != z.origin {
				return nil, fmt.Errorf("SOA record %q is not at the zone apex %s", rr.String(), z.origin)
			}
		case dns.TypeCNAME:
			// RFC 2181 10.1: one CNAME per name (a policy's item has one target too).
			if len(s.rrs) > 0 {
				return nil, fmt.Errorf("second CNAME record %q for %s: a name has at most one CNAME (RFC 2181 10.1)", rr.String(), h.Name)
			}
		case dns.TypeDNAME:
			// RFC 6672 2.4: one DNAME per owner name.
			if len(s.rrs) > 0 {
				return nil, fmt.Errorf("second DNAME record %q for %s: a name has at most one DNAME (RFC 6672 2.4)", rr.String(), h.Name)
			}
		}
		s.rrs = append(s.rrs, rr)
	}

	// Policy record sets.
	geoCache := map[string][][]uint8{}
	for _, spec := range sets {
		z := d.match(spec.name)
		if z == nil {
			return nil, spec.errf("name is outside the zones %v", origins)
		}
		if strings.HasSuffix(z.origin, "in-addr.arpa.") || strings.HasSuffix(z.origin, "ip6.arpa.") {
			return nil, spec.errf("policies are not allowed in reverse zone %s", z.origin)
		}
		n := nodeOf(z, spec.name)
		if n.find(spec.qtype) != nil {
			return nil, spec.errf("record set defined twice (a record set has one policy or plain records, not both)")
		}
		p, err := newPolicy(spec, z.origin, loc, geoCache)
		if err != nil {
			return nil, err
		}
		n.add(rrset{qtype: spec.qtype, pol: p})
		d.policies = append(d.policies, p)
	}

	if err := d.checkApexNS(srcs); err != nil {
		return nil, err
	}
	for _, z := range d.zones {
		if err := z.finish(d, now); err != nil {
			return nil, err
		}
	}
	d.occluded = d.occludedWarnings()
	return d, nil
}

// finish checks the zone (R-ZONE-3), fills in the SOA and NS when not given, adds the empty
// non-terminals and precomputes what the lookup needs: zone cuts with their referrals, DNAMEs,
// wildcards, glue and additional records (R-ZONE-2).
func (z *zone) finish(d *data, now time.Time) error {
	if err := z.checkNames(); err != nil {
		return err
	}
	// Empty non-terminals: every ancestor of a name, up to the apex, exists (RFC 4592 2.2.2).
	for _, name := range slices.Collect(maps.Keys(z.names)) {
		for p, ok := parent(name); ok && inZone(p, z.origin); p, ok = parent(p) {
			if z.names[p] != nil {
				break
			}
			z.names[p] = &node{name: p}
		}
	}
	apex := z.names[z.origin]
	if apex == nil {
		apex = &node{name: z.origin}
		z.names[z.origin] = apex
	}
	z.apex = apex
	var soaRRs, nsRRs []dns.RR
	if s := apex.find(dns.TypeSOA); s != nil {
		soaRRs = s.rrs
	} else {
		// Synthesized SOA: the serial is the load time, so every reload of changed data is a new
		// version for secondaries and caches. Serials are sequence-space arithmetic (RFC 1982):
		// the low 32 bits of the time are the serial, wrapping is what serials do.
		soa := &dns.SOA{
			Hdr:     dns.RR_Header{Name: z.origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 3600},
			Ns:      relName("ns1", z.origin),
			Mbox:    relName("hostmaster", z.origin),
			Serial:  uint32(now.Unix()), //nolint:gosec // RFC 1982 serials wrap by design
			Refresh: 7200, Retry: 1800, Expire: 1209600, Minttl: 30,
		}
		soaRRs = []dns.RR{soa}
		apex.add(rrset{qtype: dns.TypeSOA, rrs: soaRRs})
	}
	if s := apex.find(dns.TypeNS); s != nil {
		nsRRs = s.rrs
	} else {
		ns := &dns.NS{
			Hdr: dns.RR_Header{Name: z.origin, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 3600},
			Ns:  soaRRs[0].(*dns.SOA).Ns,
		}
		nsRRs = []dns.RR{ns}
		apex.add(rrset{qtype: dns.TypeNS, rrs: nsRRs})
	}
	soa := soaRRs[0].(*dns.SOA)
	z.negTTL = min(soa.Hdr.Ttl, soa.Minttl)
	// A negative answer carries the SOA with the negative TTL (RFC 2308 3).
	neg := dns.Copy(soa)
	neg.Header().Ttl = z.negTTL
	// The records answers carry, packed once (wire.go); packable checked every one of them.
	var packErr error
	pk := func(rrs []dns.RR) packed {
		p, err := pack(rrs)
		if packErr == nil {
			packErr = err
		}
		return p
	}
	z.soa = pk([]dns.RR{neg})
	z.ns = pk(nsRRs)

	z.link()
	// A zone of the block below a cut of this one is not where a CNAME of this zone leads: the
	// cut's referral answers it, as file answers (file's externalLookup finds the cut first). NS
	// records at the inner zone's own apex are that zone's (the longest zone holds a record), so
	// the walk starts above it.
	z.inner = slices.DeleteFunc(z.inner, func(o string) bool {
		for p, _ := parent(o); len(p) > len(z.origin); p, _ = parent(p) {
			if n := z.names[p]; n != nil && n.cut != nil {
				return true
			}
		}
		return false
	})
	if err := z.checkPolicies(); err != nil {
		return err
	}
	if err := z.checkLoops(); err != nil {
		return err
	}
	z.nsGlue = pk(d.glue(z.ns.rrs, z.origin))
	for _, n := range z.names {
		if n.cut != nil {
			ns := n.plain(dns.TypeNS)
			n.cut.ns, n.cut.glue = pk(ns), pk(d.glue(ns, n.name))
			if ds := n.plain(dns.TypeDS); ds != nil {
				n.cut.nsDS = pk(slices.Concat(ns, ds))
			}
		}
		if n.dname != nil {
			n.dnameP = pk([]dns.RR{n.dname})
		}
		for i := range n.sets {
			s := &n.sets[i]
			s.rrs = slices.Clip(s.rrs)
			if s.pol == nil {
				s.ans = pk(s.rrs)
				s.extra = pk(z.additional(s.rrs))
				if s.qtype == dns.TypeCNAME {
					s.target = canonicalName(s.rrs[0].(*dns.CNAME).Target)
				}
				continue
			}
			for q := s.pol; q != nil; q = q.backup {
				for j := range q.items {
					it := &q.items[j]
					rrs := make([]dns.RR, len(it.addrs))
					for k := range it.addrs {
						rrs[k] = it.addrs[k].rr
						it.addrs[k].ans = pk(rrs[k : k+1 : k+1])
					}
					it.extra = pk(z.additional(rrs))
				}
			}
		}
	}
	return packErr
}

// link sets the zone cuts, DNAMEs, wildcards and guards of the nodes.
func (z *zone) link() {
	for name, n := range z.names {
		if name != z.origin {
			if n.plain(dns.TypeNS) != nil {
				n.cut = &referral{} // its records are packed by finish
			}
		}
		if d := n.plain(dns.TypeDNAME); d != nil {
			n.dname = d[0].(*dns.DNAME)
			n.dtarget = canonicalName(n.dname.Target)
		}
		if strings.HasPrefix(name, "*.") {
			// parent, not name[2:]: the wildcard of the root zone is "*.", whose parent is ".".
			if p, _ := parent(name); z.names[p] != nil {
				z.names[p].wild = n
			}
		}
	}
	for _, n := range z.names {
		for p, ok := parent(n.name); ok && inZone(p, z.origin); p, ok = parent(p) {
			if a := z.names[p]; a.cut != nil || a.dname != nil {
				n.guard = a // the last one seen walking up is the topmost
			}
		}
	}
}

// glue returns the addresses of the name servers of ns that are at or below owner (in-domain
// glue, RFC 9471), A before AAAA, from plain records, as file does. A name server's addresses are
// found in whichever zone of the block holds them (a record belongs to the longest zone): glue
// under a cut may sit in a zone of the block below it.
func (d *data) glue(ns []dns.RR, owner string) []dns.RR {
	var out []dns.RR
	for _, rr := range ns {
		t := canonicalName(rr.(*dns.NS).Ns)
		if !inZone(t, owner) {
			continue
		}
		if z := d.match(t); z != nil {
			if n := z.names[t]; n != nil {
				out = append(out, n.plain(dns.TypeA)...)
				out = append(out, n.plain(dns.TypeAAAA)...)
			}
		}
	}
	return slices.Clip(out)
}

// additional returns the in-zone addresses of the targets of the MX, SRV, SVCB and HTTPS records
// of rrs, each target once, as file does.
func (z *zone) additional(rrs []dns.RR) []dns.RR {
	var out []dns.RR
	var seen []string
	for _, rr := range rrs {
		var t string
		switch v := rr.(type) {
		case *dns.MX:
			t = v.Mx
		case *dns.SRV:
			t = v.Target // kept as written in the record, as file does
		case *dns.SVCB:
			t = v.Target
		case *dns.HTTPS:
			t = v.Target
		default:
			continue
		}
		t = canonicalName(t)
		if !inZone(t, z.origin) || slices.Contains(seen, t) {
			continue
		}
		seen = append(seen, t)
		if n := z.names[t]; n != nil {
			out = append(out, n.plain(dns.TypeA)...)
			out = append(out, n.plain(dns.TypeAAAA)...)
		}
	}
	return slices.Clip(out)
}

// newPolicy checks spec and resolves it into a policy.
func newPolicy(spec *setSpec, zoneName string, loc *region.Locator, geoCache map[string][][]uint8) (*policy, error) {
	if !policyTypes[spec.qtype] {
		return nil, spec.errf("type %s cannot carry a policy (allowed: A, AAAA, CNAME, MX, SRV, TXT)", dns.TypeToString[spec.qtype])
	}
	if spec.check != "" && spec.qtype != dns.TypeA && spec.qtype != dns.TypeAAAA {
		return nil, spec.errf("healthcheck %q on type %s: only A and AAAA can be health-checked", spec.check, dns.TypeToString[spec.qtype])
	}
	p := &policy{kind: spec.kind, name: spec.name, qtype: spec.qtype, label: spec.String(), zone: zoneName, fence: spec.fence}
	p.mdPolicy = func() string { return p.kind.String() }
	t := loc.Table
	// maxItems: a query keeps per-item state on the stack and geo orders items by uint8.
	if n := max(len(spec.items), len(spec.backup)); n > maxItems {
		return nil, spec.errf("%d items, at most %d allowed", n, maxItems)
	}
	switch spec.kind {
	case WRR:
		if len(spec.items) == 0 {
			return nil, spec.errf("no items")
		}
		for i, is := range spec.items {
			// R-WRR-1: weights 0..1000 inclusive.
			if is.weight < 0 || is.weight > 1000 || is.weight != is.weight {
				return nil, spec.errf("weight %v out of range 0..1000", is.weight)
			}
			it, err := newItem(spec, strconv.Itoa(i), is.rdata)
			if err != nil {
				return nil, err
			}
			it.weight = is.weight
			p.items = append(p.items, it)
		}
	case Geo:
		if err := p.addGeoItems(spec, spec.items, t); err != nil {
			return nil, err
		}
		p.buildNearest(t, geoCache)
	case Failover:
		if spec.trickle < 0 || spec.trickle > 1 || spec.trickle != spec.trickle {
			return nil, spec.errf("trickle %v out of range 0..1", spec.trickle)
		}
		p.trickle = spec.trickle
		if len(spec.items) != 1 {
			return nil, spec.errf("failover needs one primary set")
		}
		it, err := newItem(spec, "primary", spec.items[0].rdata)
		if err != nil {
			return nil, err
		}
		p.items = []item{it}
		b := &policy{kind: Geo, name: spec.name, qtype: spec.qtype, label: spec.String(), zone: zoneName, fence: spec.fence}
		if err := b.addGeoItems(spec, spec.backup, t); err != nil {
			return nil, err
		}
		b.buildNearest(t, geoCache)
		for i := range b.items {
			b.items[i].label = "backup/" + b.items[i].label
			l := b.items[i].label
			b.items[i].mdItem = func() string { return l }
		}
		p.backup = b
	default:
		return nil, spec.errf("unknown policy")
	}
	return p, nil
}

func (p *policy) addGeoItems(spec *setSpec, items []itemSpec, t *region.Table) error {
	if len(items) == 0 {
		return spec.errf("no locations")
	}
	seen := map[region.ID]bool{}
	for _, is := range items {
		id, err := t.Resolve(is.location)
		if err != nil {
			return spec.errf("%v", err)
		}
		if seen[id] {
			return spec.errf("location %s given twice", is.location)
		}
		seen[id] = true
		it, err := newItem(spec, is.location, is.rdata)
		if err != nil {
			return err
		}
		it.loc = id
		p.items = append(p.items, it)
	}
	return nil
}

// newItem parses the rdata of one item into records with their health keys.
func newItem(spec *setSpec, label string, rdata []string) (item, error) {
	it := item{label: label, served: new(atomic.Pointer[cachedCounter])}
	it.mdItem = func() string { return label }
	if len(rdata) == 0 {
		return it, spec.errf("item %s has no rdata", label)
	}
	if spec.qtype == dns.TypeCNAME && len(rdata) > 1 {
		return it, spec.errf("item %s has %d CNAME targets, a name has at most one CNAME", label, len(rdata))
	}
	for _, rd := range rdata {
		rr, err := newRR(spec.name, spec.ttl, spec.qtype, rd, spec.rdOrigin)
		if err != nil {
			return it, spec.errf("item %s: %v", label, err)
		}
		lowerTargets(rr)
		if c, ok := rr.(*dns.CNAME); ok {
			it.target = canonicalName(c.Target) // one per item (above)
		}
		for _, o := range it.addrs {
			if dns.IsDuplicate(o.rr, rr) {
				return it, spec.errf("item %s: rdata %q given twice", label, rd)
			}
		}
		a := addr{rr: rr}
		if ip, ok := addrOf(rr); ok {
			a.hasKey = true
			a.key = health.Key{Addr: ip}
			if spec.check != "" && (spec.endpoints == nil || spec.endpoints[ip]) {
				a.key.Check = spec.check
				a.explicit = true
			}
		}
		it.addrs = append(it.addrs, a)
	}
	return it, nil
}

// addrOf returns the address of an A or AAAA record.
func addrOf(rr dns.RR) (netip.Addr, bool) {
	switch v := rr.(type) {
	case *dns.A:
		a, ok := netip.AddrFromSlice(v.A.To4())
		return a, ok
	case *dns.AAAA:
		a, ok := netip.AddrFromSlice(v.AAAA)
		return a, ok
	}
	return netip.Addr{}, false
}

// newRR parses one rdata of type qtype for name; names in the rdata are relative to origin, or,
// when origin is "" (a record-set file's), must be absolute.
func newRR(name string, ttl uint32, qtype uint16, rdata, origin string) (dns.RR, error) {
	ts := dns.TypeToString[qtype]
	if strings.TrimSpace(rdata) == "" {
		// miekg/dns would read a record without data as a dynamic update's (DS 0 0 0).
		return nil, fmt.Errorf("no rdata (a %s record needs some)", ts)
	}
	absolute := origin == ""
	if absolute {
		origin = "."
	}
	line := name + " " + strconv.FormatUint(uint64(ttl), 10) + " IN " + ts + " " + rdata
	zp := dns.NewZoneParser(strings.NewReader(line), origin, "")
	rr, _ := zp.Next()
	err := zp.Err()
	if err == nil {
		if _, more := zp.Next(); more {
			err = fmt.Errorf("more than one record")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("rdata %q is not valid %s data: %v", rdata, ts, err)
	}
	if rr == nil || rr.Header().Rrtype != qtype {
		return nil, fmt.Errorf("rdata %q is not valid %s data", rdata, ts)
	}
	if err := packable(rr); err != nil {
		return nil, fmt.Errorf("rdata %q is not valid %s data: %v", rdata, ts, err)
	}
	if absolute && hasRelativeName(rr, line) {
		return nil, fmt.Errorf("rdata %q has a relative name: names in a record-set file must be absolute (end with a dot)", rdata)
	}
	if qtype == dns.TypeA || qtype == dns.TypeAAAA {
		// dns.NewRR accepts an IPv4 address for AAAA and the other way round in some forms.
		if ip, ok := addrOf(rr); !ok || ip.Is4() != (qtype == dns.TypeA) {
			return nil, fmt.Errorf("rdata %q is not a valid %s address", rdata, ts)
		}
	}
	return rr, nil
}

// packable returns an error when rr cannot be written into a message, or has no rdata where
// its type needs some: the zone parser accepts `a CNAME` with nothing after it (as dynamic updates
// write deletions), which file loads and answers with an empty CNAME no resolver can use.
func packable(rr dns.RR) error {
	// miekg/dns packs an owner name longer than a name may be, and then cannot read it back
	// (nor could a resolver), which also hid the missing rdata below from this check.
	if wireLen(rr.Header().Name) > maxNameLen {
		return fmt.Errorf("the owner name is longer than %d octets", maxNameLen)
	}
	buf := make([]byte, 2*dns.Len(rr)+64)
	off, err := dns.PackRR(rr, buf, 0, nil, false)
	if err == dns.ErrBuf {
		buf = make([]byte, dns.MaxMsgSize)
		off, err = dns.PackRR(rr, buf, 0, nil, false)
	}
	if err != nil {
		return fmt.Errorf("the record cannot be written in a message: %v", err)
	}
	// Names in rdata longer than a name may be (a relative CNAME target completed with the
	// origin) pack too, and no one can read them.
	if _, _, err := dns.UnpackRR(buf[:off], 0); err != nil {
		return fmt.Errorf("the record cannot be read back from a message: %v", err)
	}
	switch rr.Header().Rrtype {
	case dns.TypeNULL, dns.TypeAPL: // their rdata may be empty (RFC 1035 3.3.10, RFC 3123 4)
	default:
		if _, hdr, err := dns.UnpackDomainName(buf, 0); err == nil && off == hdr+10 {
			return fmt.Errorf("no rdata (a %s record needs some)", dns.TypeToString[rr.Header().Rrtype])
		}
		// A record with no data of its own, every field zero (SRV 0 0 0 with no target, CAA 0
		// "" ""), packs to a few octets of nonsense. The text checks keep miekg/dns's form of a
		// line without data out (parseZoneFile's sentinel line, newRR's empty rdata); this
		// refuses the RFC 3597 form `\# 0` of such a type. Zero data that parses back when
		// printed (AMTRELAY 0 0 0 ., HINFO "" "") was written so, and loads.
		if emptyForm(rr) && !reparses(rr) {
			return fmt.Errorf("no rdata (a %s record needs some; read as its empty form %q)", dns.TypeToString[rr.Header().Rrtype], rr.String())
		}
	}
	return nil
}

// emptyForm reports whether rr's data is the zero value of its type: what miekg/dns's zone parser
// gives for a record written without data, and also what some valid data is (HINFO "" "",
// AMTRELAY 0 0 0 ., EUI48 of zeros), which reparses tells apart.
func emptyForm(rr dns.RR) bool {
	newRR, ok := dns.TypeToRR[rr.Header().Rrtype]
	if !ok {
		return false
	}
	zero := newRR()
	*zero.Header() = *rr.Header()
	return zero.String() == rr.String()
}

// reparses reports whether rr's presentation form parses back: all-zero data that was written
// does; the empty form of SRV (no target), CAA (no tag) or HTTPS does not.
func reparses(rr dns.RR) bool {
	_, err := dns.NewRR(rr.String())
	return err == nil
}
