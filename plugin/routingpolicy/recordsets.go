package routingpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/miekg/dns"
	"sigs.k8s.io/yaml"
)

// The managed-DNS API's ResourceRecordSet, as `resourceRecordSets.list` returns it and as a
// zone export contains it (JSON, or YAML with the same field names).
type apiRecordSet struct {
	Name          string            `json:"name"`
	Type          string            `json:"type"`
	TTL           *int64            `json:"ttl"`
	Rrdatas       []string          `json:"rrdatas"`
	Signatures    []string          `json:"signatureRrdatas"`
	RoutingPolicy *apiRoutingPolicy `json:"routingPolicy"`
}

type apiRoutingPolicy struct {
	WRR           *apiWRR           `json:"wrr"`
	Geo           *apiGeo           `json:"geo"`
	PrimaryBackup *apiPrimaryBackup `json:"primaryBackup"`
	HealthCheck   string            `json:"healthCheck"`
}

type apiWRR struct {
	Items []apiWRRItem `json:"items"`
}

type apiWRRItem struct {
	Weight               float64     `json:"weight"`
	Rrdatas              []string    `json:"rrdatas"`
	Signatures           []string    `json:"signatureRrdatas"`
	HealthCheckedTargets *apiTargets `json:"healthCheckedTargets"`
}

type apiGeo struct {
	Items         []apiGeoItem `json:"items"`
	EnableFencing bool         `json:"enableFencing"`
}

type apiGeoItem struct {
	Location             string      `json:"location"`
	Rrdatas              []string    `json:"rrdatas"`
	Signatures           []string    `json:"signatureRrdatas"`
	HealthCheckedTargets *apiTargets `json:"healthCheckedTargets"`
}

type apiPrimaryBackup struct {
	PrimaryTargets   *apiTargets `json:"primaryTargets"`
	BackupGeoTargets *apiGeo     `json:"backupGeoTargets"`
	TrickleTraffic   float64     `json:"trickleTraffic"`
}

type apiTargets struct {
	InternalLoadBalancers []apiILB `json:"internalLoadBalancers"`
	ExternalEndpoints     []string `json:"externalEndpoints"`
}

type apiILB struct {
	IPAddress string `json:"ipAddress"`
}

// known lists the fields we read or knowingly ignore, per object kind; anything else is warned
// about and left out.
var known = map[string][]string{
	"rrset":   {"kind", "name", "type", "ttl", "rrdatas", "signatureRrdatas", "routingPolicy"},
	"policy":  {"kind", "wrr", "geo", "primaryBackup", "healthCheck"},
	"wrr":     {"kind", "items"},
	"wrrItem": {"kind", "weight", "rrdatas", "signatureRrdatas", "healthCheckedTargets"},
	"geo":     {"kind", "items", "enableFencing"},
	"geoItem": {"kind", "location", "rrdatas", "signatureRrdatas", "healthCheckedTargets"},
	"pb":      {"kind", "primaryTargets", "backupGeoTargets", "trickleTraffic"},
	"targets": {"kind", "internalLoadBalancers", "externalEndpoints"},
	"ilb":     {"kind", "ipAddress", "port", "ipProtocol", "loadBalancerType", "networkUrl", "project", "region"},
}

// children says which fields hold objects of which kind.
var children = map[string]map[string]string{
	"rrset":   {"routingPolicy": "policy"},
	"policy":  {"wrr": "wrr", "geo": "geo", "primaryBackup": "pb"},
	"wrr":     {"items": "wrrItem"},
	"geo":     {"items": "geoItem"},
	"wrrItem": {"healthCheckedTargets": "targets"},
	"geoItem": {"healthCheckedTargets": "targets"},
	"pb":      {"primaryTargets": "targets", "backupGeoTargets": "geo"},
	"targets": {"internalLoadBalancers": "ilb"},
}

// unknownFields walks v (decoded JSON) as an object of kind and reports fields we do not know.
func unknownFields(v any, kind, where string, out *[]string) {
	switch o := v.(type) {
	case []any:
		for i, e := range o {
			unknownFields(e, kind, fmt.Sprintf("%s[%d]", strings.TrimSuffix(where, "."), i)+".", out)
		}
	case map[string]any:
		keys := make([]string, 0, len(o))
		for k := range o {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !slices.Contains(known[kind], k) {
				*out = append(*out, fmt.Sprintf("unknown field %q ignored", where+k))
				continue
			}
			if ck, ok := children[kind][k]; ok {
				unknownFields(o[k], ck, where+k+".", out)
			}
		}
	}
}

// parseRecordSets reads ResourceRecordSet objects: a JSON array, an object with an "rrsets" list
// (as the list call returns) or one record set; or the same in YAML, where a stream of documents
// separated by "---" (as gcloud dns record-sets export and list --format=yaml write them, a record
// set each) is read document by document. Record sets without a routing policy are plain records.
func parseRecordSets(b []byte, file string) ([]dns.RR, []*setSpec, []string, error) {
	docs, err := documents(b)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("recordsets %s: %v", file, err)
	}
	type rawSet struct {
		js    json.RawMessage
		where string // for errors, when the record set has no name
	}
	var raw []rawSet
	for d, js := range docs {
		sets, err := recordSetsOf(js)
		if err != nil {
			if len(docs) > 1 {
				return nil, nil, nil, fmt.Errorf("recordsets %s: document %d: %v", file, d+1, err)
			}
			return nil, nil, nil, fmt.Errorf("recordsets %s: %v", file, err)
		}
		for i, r := range sets {
			where := fmt.Sprintf("record set %d", i)
			if len(docs) > 1 {
				where = fmt.Sprintf("document %d, record set %d", d+1, i)
			}
			raw = append(raw, rawSet{r, where})
		}
	}
	var (
		records []dns.RR
		sets    []*setSpec
		warns   []string
	)
	for _, rw := range raw {
		var rs apiRecordSet
		r, where := rw.js, rw.where
		var probe struct {
			Name string `json:"name"`
			Type string `json:"type"`
		}
		if json.Unmarshal(r, &probe) == nil && probe.Name != "" {
			where = fmt.Sprintf("record set %s %s", probe.Name, probe.Type)
		}
		if err := json.Unmarshal(r, &rs); err != nil {
			return nil, nil, nil, fmt.Errorf("recordsets %s: %s: %v", file, where, err)
		}
		var generic any
		if json.Unmarshal(r, &generic) == nil {
			var unknown []string
			unknownFields(generic, "rrset", "", &unknown)
			for _, u := range unknown {
				warns = append(warns, where+": "+u)
			}
		}
		rrs, s, err := rs.convert(file)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("recordsets %s: %s: %v", file, where, err)
		}
		if p := rs.RoutingPolicy; s == nil && p != nil && p.HealthCheck != "" {
			// Plain records: there is no policy for the check to steer.
			warns = append(warns, fmt.Sprintf("%s: routingPolicy.healthCheck %q ignored: no wrr, geo or primaryBackup policy", where, p.HealthCheck))
		}
		records = append(records, rrs...)
		if s != nil {
			sets = append(sets, s)
		}
	}
	return records, sets, warns, nil
}

// documents returns the JSON of each document of b: b itself when it is JSON, else each
// document of the YAML stream it is.
func documents(b []byte) ([][]byte, error) {
	trim := bytes.TrimSpace(b)
	looksJSON := len(trim) > 0 && (trim[0] == '[' || trim[0] == '{')
	if looksJSON && json.Valid(trim) {
		return [][]byte{trim}, nil
	}
	chunks := yamlDocuments(b)
	out := make([][]byte, 0, len(chunks))
	for i, c := range chunks {
		js, err := yaml.YAMLToJSON(c)
		switch {
		case err == nil:
			out = append(out, js)
		case looksJSON: // JSON with a mistake, or a YAML stream in flow style that has one
			return nil, fmt.Errorf("not JSON (%v) nor YAML (%v)", json.Unmarshal(trim, new(any)), err)
		case len(chunks) > 1:
			return nil, fmt.Errorf("not JSON or YAML: document %d: %v", i+1, err)
		default:
			return nil, fmt.Errorf("not JSON or YAML: %v", err)
		}
	}
	return out, nil
}

// yamlDocuments splits a YAML stream into its documents, as text, for sigs.k8s.io/yaml, which
// reads one: a document starts at a line "---" (content may follow on it) and ends before the
// next, or with a line "...". Such lines cannot be content (YAML 1.2, c-forbidden), so no parse
// is needed. Lines end as go-yaml ends them: LF, CR LF, CR, and NEL, LS, PS (YAML 1.1).
// Comments and directives before a document's content stay with it; a stream of one document is
// one piece, the whole of b.
func yamlDocuments(b []byte) [][]byte {
	var out [][]byte
	start, begun := 0, false // begun: the current document has content, or its "---"
	for i := 0; i < len(b); {
		end := lineEnd(b, i)
		line := b[i:end]
		switch {
		case isMarker(line, "---"):
			if begun {
				out, start = append(out, b[start:i]), i
			}
			begun = true
		case isMarker(line, "..."):
			out, start, begun = append(out, b[start:end]), end, false
		case !begun:
			t := bytes.TrimLeft(line, " \t\r\n\ufeff\u0085\u2028\u2029")
			begun = len(t) > 0 && t[0] != '#' && t[0] != '%'
		}
		i = end
	}
	if begun || len(out) == 0 {
		out = append(out, b[start:])
	}
	return out
}

// lineBreaks are the line breaks of go-yaml: LF and CR, and NEL, LS and PS.
var lineBreaks = []string{"\n", "\r", "\u0085", "\u2028", "\u2029"}

// lineEnd returns where the line that starts at i ends, after its line break.
func lineEnd(b []byte, i int) int {
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '\n':
			return j + 1
		case '\r':
			if j+1 < len(b) && b[j+1] == '\n' {
				return j + 2
			}
			return j + 1
		case 0xc2, 0xe2:
			for _, lb := range lineBreaks[2:] {
				if bytes.HasPrefix(b[j:], []byte(lb)) {
					return j + len(lb)
				}
			}
		}
	}
	return len(b)
}

// isMarker reports whether line is the document marker m ("---" or "..."), alone or followed by
// white space or its line break.
func isMarker(line []byte, m string) bool {
	if !bytes.HasPrefix(line, []byte(m)) {
		return false
	}
	rest := line[len(m):]
	if len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' {
		return true
	}
	for _, lb := range lineBreaks {
		if bytes.HasPrefix(rest, []byte(lb)) {
			return true
		}
	}
	return false
}

// listResponse is the kind of the list call's answer, whose empty list of record sets it leaves
// out (`{"kind": "dns#resourceRecordSetsListResponse"}`).
const listResponse = "dns#resourceRecordSetsListResponse"

// recordSetsOf returns the record sets of one JSON document: a list of them, an object with an
// "rrsets" list (any case, as encoding/json matches fields), one record set (an object with a name
// or a type); none for null, {} and the list call's answer without rrsets; an error for another
// object (another kind of resource).
func recordSetsOf(js []byte) ([]json.RawMessage, error) {
	trim := bytes.TrimSpace(js)
	switch {
	case string(trim) == "null":
		return nil, nil
	case len(trim) > 0 && trim[0] == '{':
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(trim, &obj); err != nil {
			return nil, err
		}
		var list json.RawMessage
		for k, v := range obj {
			if strings.EqualFold(k, "rrsets") {
				if list != nil {
					return nil, fmt.Errorf("rrsets given twice")
				}
				list = v
			}
		}
		if list != nil {
			var raw []json.RawMessage
			if err := json.Unmarshal(list, &raw); err != nil {
				return nil, fmt.Errorf("rrsets: want a list of record sets: %v", err)
			}
			return raw, nil
		}
		for k := range obj {
			if strings.EqualFold(k, "name") || strings.EqualFold(k, "type") {
				return []json.RawMessage{trim}, nil // one record set
			}
		}
		var kind string
		_ = json.Unmarshal(obj["kind"], &kind)
		if len(obj) == 0 || kind == listResponse {
			return nil, nil // nothing, or the answer of a list call that found nothing
		}
		return nil, fmt.Errorf("an object that is neither a record set (name, type) nor a list of them (rrsets): kind %q", kind)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(trim, &raw); err != nil {
		return nil, fmt.Errorf("want a list of record sets, an object with rrsets or one record set: %v", err)
	}
	return raw, nil
}

// convert turns one API record set into plain records or a setSpec.
func (rs *apiRecordSet) convert(file string) ([]dns.RR, *setSpec, error) {
	if rs.Name == "" || !dns.IsFqdn(rs.Name) {
		return nil, nil, fmt.Errorf("name %q must be a fully qualified name ending in a dot", rs.Name)
	}
	if _, ok := dns.IsDomainName(rs.Name); !ok {
		return nil, nil, fmt.Errorf("name %q is not a domain name", rs.Name)
	}
	qtype, ok := dns.StringToType[strings.ToUpper(rs.Type)]
	if !ok {
		return nil, nil, fmt.Errorf("unknown type %q", rs.Type)
	}
	ttl := uint32(300)
	if rs.TTL != nil {
		if *rs.TTL < 0 || *rs.TTL > 2147483647 {
			return nil, nil, fmt.Errorf("ttl %d out of range 0..2147483647", *rs.TTL)
		}
		ttl = uint32(*rs.TTL)
	}
	if err := unsigned("", rs.Signatures); err != nil {
		return nil, nil, err
	}
	name := canonicalName(rs.Name)
	rp := rs.RoutingPolicy
	if rp == nil || (rp.WRR == nil && rp.Geo == nil && rp.PrimaryBackup == nil) {
		if len(rs.Rrdatas) == 0 {
			return nil, nil, fmt.Errorf("no rrdatas and no routingPolicy")
		}
		var out []dns.RR
		for _, rd := range rs.Rrdatas {
			rr, err := newRR(name, ttl, qtype, rd, "") // names absolute, as an export writes them
			if err != nil {
				return nil, nil, err
			}
			out = append(out, rr)
		}
		return out, nil, nil
	}
	n := 0
	for _, set := range []bool{rp.WRR != nil, rp.Geo != nil, rp.PrimaryBackup != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		// WRR mixed with geo is not allowed; geo as a failover backup is written as primaryBackup.
		return nil, nil, fmt.Errorf("routingPolicy has more than one of wrr, geo and primaryBackup (only one is allowed; geo as a backup goes in primaryBackup.backupGeoTargets)")
	}
	if len(rs.Rrdatas) > 0 {
		return nil, nil, fmt.Errorf("rrdatas and routingPolicy both given (a policy record set has its rrdatas in its items)")
	}
	s := &setSpec{name: name, qtype: qtype, ttl: ttl, origin: file}
	if rp.HealthCheck != "" {
		// The API names checks by resource URL (projects/P/regions/R/healthChecks/NAME); the
		// healthcheck plugin names them by NAME.
		s.check = path.Base(rp.HealthCheck)
	}
	eps := map[netip.Addr]bool{}
	ilbs := false
	addTargets := func(t *apiTargets) ([]string, error) {
		if t == nil {
			return nil, nil
		}
		var ips []string
		for _, e := range t.ExternalEndpoints {
			a, err := netip.ParseAddr(e)
			if err != nil {
				return nil, fmt.Errorf("externalEndpoints: %q is not an IP address", e)
			}
			eps[a] = true
			ips = append(ips, e)
		}
		for _, l := range t.InternalLoadBalancers {
			if _, err := netip.ParseAddr(l.IPAddress); err != nil {
				return nil, fmt.Errorf("internalLoadBalancers: ipAddress %q is not an IP address", l.IPAddress)
			}
			// A load-balancer VIP is checked through its derived state on the board, not by the
			// record set's check.
			ilbs = true
			ips = append(ips, l.IPAddress)
		}
		return ips, nil
	}
	// rdataOf returns an item's rrdatas, or its targets' addresses when it gives none.
	rdataOf := func(rrdatas []string, t *apiTargets) ([]string, error) {
		ips, err := addTargets(t)
		if err != nil {
			return nil, err
		}
		if len(rrdatas) > 0 {
			return rrdatas, nil
		}
		return ips, nil
	}
	switch {
	case rp.WRR != nil:
		s.kind = WRR
		for i, it := range rp.WRR.Items {
			if err := unsigned(fmt.Sprintf("wrr item %d: ", i), it.Signatures); err != nil {
				return nil, nil, err
			}
			rd, err := rdataOf(it.Rrdatas, it.HealthCheckedTargets)
			if err != nil {
				return nil, nil, fmt.Errorf("wrr item %d: %v", i, err)
			}
			s.items = append(s.items, itemSpec{weight: it.Weight, rdata: rd})
		}
	case rp.Geo != nil:
		s.kind = Geo
		s.fence = rp.Geo.EnableFencing
		items, err := geoItems(rp.Geo, rdataOf)
		if err != nil {
			return nil, nil, err
		}
		s.items = items
	case rp.PrimaryBackup != nil:
		s.kind = Failover
		pb := rp.PrimaryBackup
		rd, err := rdataOf(nil, pb.PrimaryTargets)
		if err != nil {
			return nil, nil, fmt.Errorf("primaryTargets: %v", err)
		}
		if len(rd) == 0 {
			return nil, nil, fmt.Errorf("primaryTargets has no addresses")
		}
		s.items = []itemSpec{{rdata: rd}}
		if pb.BackupGeoTargets == nil {
			return nil, nil, fmt.Errorf("primaryBackup has no backupGeoTargets")
		}
		s.fence = pb.BackupGeoTargets.EnableFencing
		items, err := geoItems(pb.BackupGeoTargets, rdataOf)
		if err != nil {
			return nil, nil, fmt.Errorf("backupGeoTargets: %v", err)
		}
		s.backup = items
		s.trickle = pb.TrickleTraffic
	}
	if s.check != "" && (len(eps) > 0 || ilbs) {
		// Only the listed external endpoints are probed by the check, whether or not load
		// balancers are listed beside them; with no target listed the check applies to every
		// address.
		s.endpoints = eps
	}
	return nil, s, nil
}

func geoItems(g *apiGeo, rdataOf func([]string, *apiTargets) ([]string, error)) ([]itemSpec, error) {
	var out []itemSpec
	for i, it := range g.Items {
		if err := unsigned(fmt.Sprintf("geo item %d (%s): ", i, it.Location), it.Signatures); err != nil {
			return nil, err
		}
		rd, err := rdataOf(it.Rrdatas, it.HealthCheckedTargets)
		if err != nil {
			return nil, fmt.Errorf("geo item %d (%s): %v", i, it.Location, err)
		}
		out = append(out, itemSpec{location: it.Location, rdata: rd})
	}
	return out, nil
}

// unsigned refuses signatures (signatureRrdatas) as the zone file's RRSIG records are refused:
// served as they are, they would not cover what a policy answers per query (RFC 4035 3.1); the
// dnssec plugin signs what is served. An empty list is what an unsigned zone's export holds.
func unsigned(where string, sigs []string) error {
	if len(sigs) == 0 {
		return nil
	}
	return fmt.Errorf("%ssignatureRrdatas given (%d): signed zone data is not supported (sign with the dnssec plugin instead)", where, len(sigs))
}

// relativeMark is the origin hasRelativeName completes relative names with: no name of a zone
// ends in it (RFC 6761 6.4).
const relativeMark = "relative.invalid."

// hasRelativeName reports whether the record rr, parsed from line with the root as origin, has
// a relative name in its rdata: parsed again with relativeMark as origin it is another record.
// Comparing the records, not the rdata's fields, covers every type that carries names.
func hasRelativeName(rr dns.RR, line string) bool {
	zp := dns.NewZoneParser(strings.NewReader(line), relativeMark, "")
	again, _ := zp.Next()
	return zp.Err() != nil || again == nil || again.String() != rr.String()
}
