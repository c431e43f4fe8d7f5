package routingpolicy

import (
	"fmt"
	"strings"
)

// dataItem is one item of a routing-policy data string: a key (a weight or a region) and its
// rdata.
type dataItem struct {
	key   string
	rdata []string
}

// parseData parses the managed-DNS command line's routing-policy data form:
// "KEY=RDATA[,RDATA...][;KEY=RDATA...]". Items are separated by ';', the key from its data by the
// first '=', the rdata of one item by ','. Spaces around separators are ignored.
func parseData(s string) ([]dataItem, error) {
	var out []dataItem
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("item %q has no '=' (want KEY=RDATA[,RDATA...])", part)
		}
		k = strings.TrimSpace(k)
		if k == "" {
			return nil, fmt.Errorf("item %q has an empty key (want KEY=RDATA[,RDATA...])", part)
		}
		rdata, err := parseList(v)
		if err != nil {
			return nil, fmt.Errorf("item %q: %w", k, err)
		}
		out = append(out, dataItem{key: k, rdata: rdata})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no items in %q (want KEY=RDATA[,RDATA...][;KEY=...])", s)
	}
	return out, nil
}

// parseList splits "RDATA[,RDATA...]" and rejects empty entries.
func parseList(s string) ([]string, error) {
	var out []string
	for r := range strings.SplitSeq(s, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			return nil, fmt.Errorf("empty rdata in %q", s)
		}
		out = append(out, r)
	}
	return out, nil
}
