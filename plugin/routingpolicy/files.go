package routingpolicy

import (
	"bytes"
	"fmt"
	"iter"
	"os"
	"slices"
	"time"

	"github.com/miekg/dns"
)

// recordSource is the plain records of one source: the Corefile or a file.
type recordSource struct {
	name string // for messages: "the Corefile" or the file's name
	kind sourceKind
	rrs  []dns.RR
}

// sourceKind says where records come from, for the checks that depend on it (checkApexNS).
type sourceKind uint8

const (
	inlineSource    sourceKind = iota // the Corefile's records
	zoneFileSource                    // an RFC 1035 master file
	recordSetSource                   // a record-set file, the export of a managed zone
)

// checkApexNS refuses, before finish would synthesize one, a zone without NS records at its apex
// whose data a file says is complete: a zone file gives the NS records of every zone its records
// are in (RFC 1035 5.2, RFC 1034 4.2.1); a record-set file that gives a zone's SOA exports the
// zone, NS included. The synthesis is for the Corefile's records and for record-set files that
// give neither.
func (d *data) checkApexNS(srcs []recordSource) error {
	need := map[*zone]*recordSource{}
	for src, rr := range allRecords(srcs) {
		z := d.match(rr.Header().Name) // every record is in a zone by now (build)
		switch {
		case need[z] != nil:
		case src.kind == zoneFileSource:
			need[z] = src
		case src.kind == recordSetSource && rr.Header().Rrtype == dns.TypeSOA:
			need[z] = src
		}
	}
	for _, z := range d.zones {
		src := need[z]
		if src == nil {
			continue
		}
		if apex := z.names[z.origin]; apex != nil && apex.find(dns.TypeNS) != nil {
			continue
		}
		if src.kind == zoneFileSource {
			return fmt.Errorf("zonefile %s has no NS records at the apex of %s: a zone file gives its zone's NS records (RFC 1035 5.2, RFC 1034 4.2.1)", src.name, z.origin)
		}
		return fmt.Errorf("recordsets %s gives the SOA of %s but no NS records at its apex: the export of a zone gives both (RFC 1034 4.2.1)", src.name, z.origin)
	}
	return nil
}

// allRecords yields the records of srcs, in order, with their source.
func allRecords(srcs []recordSource) iter.Seq2[*recordSource, dns.RR] {
	return func(yield func(*recordSource, dns.RR) bool) {
		for i := range srcs {
			for _, rr := range srcs[i].rrs {
				if !yield(&srcs[i], rr) {
					return
				}
			}
		}
	}
}

// load reads the files of cfg and builds its data with the inline records and record sets. The
// data holds the stamps of the files, taken before they were read.
func (cfg *Config) load(now time.Time) (*data, error) {
	// Copy the inline records: build normalizes their headers, and a reload must not touch the
	// records the running data serves. A file's records are read afresh at every load.
	inline := make([]dns.RR, len(cfg.Records))
	for i, rr := range cfg.Records {
		inline[i] = dns.Copy(rr)
	}
	srcs := []recordSource{{name: "the Corefile", kind: inlineSource, rrs: inline}}
	sets := append([]*setSpec(nil), cfg.Sets...)
	// Each file is stamped before it is read: a write after the stamp is seen by the next check.
	var stamps [2]fileStamp
	if cfg.ZoneFile != "" {
		stamps[0] = stampOf(cfg.ZoneFile)
		b, err := os.ReadFile(cfg.ZoneFile)
		if err != nil {
			return nil, fmt.Errorf("zonefile: %v", err)
		}
		rrs, err := parseZoneFile(b, cfg.ZoneFile, cfg.Zones[0])
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, recordSource{name: cfg.ZoneFile, kind: zoneFileSource, rrs: rrs})
	}
	if cfg.RecordSets != "" {
		stamps[1] = stampOf(cfg.RecordSets)
		b, err := os.ReadFile(cfg.RecordSets)
		if err != nil {
			return nil, fmt.Errorf("recordsets: %v", err)
		}
		rrs, ss, warns, err := parseRecordSets(b, cfg.RecordSets)
		if err != nil {
			return nil, err
		}
		for _, w := range warns {
			log.Warningf("Recordsets %s: %s", cfg.RecordSets, w)
		}
		srcs = append(srcs, recordSource{name: cfg.RecordSets, kind: recordSetSource, rrs: rrs})
		sets = append(sets, ss...)
	}
	d, err := build(cfg.Zones, cfg.Locator, srcs, sets, now)
	if err != nil {
		return nil, err
	}
	d.stamps = stamps
	return d, nil
}

// parseZoneFile reads an RFC 1035 master file. Relative names are relative to origin.
func parseZoneFile(b []byte, file, origin string) ([]dns.RR, error) {
	// R-ZONE-3: miekg/dns takes a last line without data (`www MX`, `x DS`), with or without a
	// newline, as a dynamic-update record with empty fields (MX 0 with no exchange, DS 0 0 0), and
	// refuses the same line anywhere else ("unexpected newline"). A sentinel record after the
	// file's last line makes that line one like every other; the sentinel is dropped.
	out, err := parseRecords(append(slices.Clip(b), "\n"+endSentinel+"\n"...), file, origin)
	if n := len(out); err == nil && n > 0 && out[n-1].String() == endRecord {
		return out[:n-1], nil
	}
	// The error the parser gives for the file alone, where it has one: it names the file's own
	// lines (an open parenthesis or quote at the end takes the sentinel in). Only a last line
	// without data parses alone, and is refused here as it would be anywhere else.
	if _, e := parseRecords(b, file, origin); e != nil {
		err = e
	} else if err == nil {
		err = fmt.Errorf("%s: the last line is not complete", file)
	}
	return nil, fmt.Errorf("zonefile: %v", err)
}

// parseRecords reads the records of b, a master file, with includes refused.
func parseRecords(b []byte, file, origin string) ([]dns.RR, error) {
	zp := dns.NewZoneParser(bytes.NewReader(b), origin, file)
	zp.SetIncludeAllowed(false)
	var out []dns.RR
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		out = append(out, rr)
	}
	return out, zp.Err()
}

// endSentinel is the line parseZoneFile adds after a zone file's last line, and endRecord the
// record it parses as.
const (
	endSentinel = "coresteer-end-of-file.invalid. 0 IN TXT \"end\""
	endRecord   = "coresteer-end-of-file.invalid.\t0\tIN\tTXT\t\"end\""
)
