package routingpolicy

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/miekg/dns"
)

// load reads the files of cfg and builds its data with the inline records and record sets.
func (cfg *Config) load(now time.Time) (*data, error) {
	records := append([]dns.RR(nil), cfg.Records...)
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
		records = append(records, rrs...)
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
		records = append(records, rrs...)
		sets = append(sets, ss...)
	}
	// Copy the records: build normalizes their headers, and a reload must not touch the records
	// the running data serves.
	for i, rr := range records {
		records[i] = dns.Copy(rr)
	}
	return build(cfg.Zones, cfg.Locator, records, sets, now)
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
