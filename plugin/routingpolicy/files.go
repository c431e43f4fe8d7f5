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
	rrs  []dns.RR
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

// load reads the files of cfg and builds its data with the inline records and record sets.
func (cfg *Config) load(now time.Time) (*data, error) {
	// Copy the inline records: build normalizes their headers, and a reload must not touch the
	// records the running data serves. A file's records are read afresh at every load.
	inline := make([]dns.RR, len(cfg.Records))
	for i, rr := range cfg.Records {
		inline[i] = dns.Copy(rr)
	}
	srcs := []recordSource{{name: "the Corefile", rrs: inline}}
	sets := append([]*setSpec(nil), cfg.Sets...)
	if cfg.ZoneFile != "" {
		b, err := os.ReadFile(cfg.ZoneFile)
		if err != nil {
			return nil, fmt.Errorf("zonefile: %v", err)
		}
		rrs, err := parseZoneFile(b, cfg.ZoneFile, cfg.Zones[0])
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, recordSource{name: cfg.ZoneFile, rrs: rrs})
	}
	if cfg.RecordSets != "" {
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
		srcs = append(srcs, recordSource{name: cfg.RecordSets, rrs: rrs})
		sets = append(sets, ss...)
	}
	return build(cfg.Zones, cfg.Locator, srcs, sets, now)
}

// parseZoneFile reads an RFC 1035 master file. Relative names are relative to origin.
func parseZoneFile(b []byte, file, origin string) ([]dns.RR, error) {
	if len(b) > 0 && b[len(b)-1] != '\n' {
		// R-ZONE-3: miekg/dns takes a last line cut short at the end of the file (`www MX`, no
		// newline) as a dynamic-update record with empty fields (MX 0 with no exchange), and
		// refuses the same line anywhere else: end the file as every other line ends.
		b = append(slices.Clip(b), '\n')
	}
	zp := dns.NewZoneParser(bytes.NewReader(b), origin, file)
	zp.SetIncludeAllowed(false)
	var out []dns.RR
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		out = append(out, rr)
	}
	if err := zp.Err(); err != nil {
		return nil, fmt.Errorf("zonefile: %v", err)
	}
	return out, nil
}

// fileStamp identifies the version of a file for the reload loop.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) fileStamp {
	if path == "" {
		return fileStamp{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{size: -1}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}
}
