// Package chain places the coresteer directives in CoreDNS's plugin chain. The custom binary in
// cmd/coredns and every integration test use it, so the order they run is the order we test.
package chain

import (
	"fmt"
	"slices"
	"sync"

	"github.com/coredns/coredns/core/dnsserver"
)

// Our directives, where each goes, and why (DESIGN.md section 1).
var placements = []struct {
	name   string
	before string // inserted immediately before this directive
	after  string // or immediately after this one
}{
	// The health plugins answer no query, and their handler is the next plugin's ServeDNS
	// (plugin/pkg/passive): their place in the order is when they set up. Early, right after
	// metadata, healthcheck first so its checks are defined before pschealth, routingpolicy and
	// outbound set up.
	{name: "healthcheck", after: "metadata"},
	{name: "pschealth", after: "healthcheck"},
	// Like health and ready, status serves HTTP and answers no query: it sits with them, right
	// after health, and adds no handler to the chain (S-3).
	{name: "status", after: "health"},
	// After cache and dnssec, so dnssec signs routingpolicy answers.
	{name: "routingpolicy", before: "file"},
	// After cache, so forwarded answers can be cached.
	{name: "outbound", before: "forward"},
	// It decorates the UDP writer and, early in the chain, the ResponseWriter's Write; it answers
	// nothing. Right after shed, the other plugin that decorates that writer, so shed's setup runs
	// first and udpbatch can refuse to be combined.
	{name: "udpbatch", after: "shed"},
}

// Names returns our directives in the order they set up.
func Names() []string {
	out := make([]string, len(placements))
	for i, p := range placements {
		out[i] = p.name
	}
	return out
}

// Order returns base with our directives inserted in place. base is not modified. It fails when
// an anchor directive is missing, which means CoreDNS changed its plugin.cfg under us.
func Order(base []string) ([]string, error) {
	out := slices.Clone(base)
	for _, p := range placements {
		if slices.Contains(out, p.name) {
			continue
		}
		anchor, offset := p.before, 0
		if anchor == "" {
			anchor, offset = p.after, 1
		}
		i := slices.Index(out, anchor)
		if i < 0 {
			return nil, fmt.Errorf("cannot place %q: directive %q not in the chain", p.name, anchor)
		}
		out = slices.Insert(out, i+offset, p.name)
	}
	return out, nil
}

var once sync.Once

// Install puts our directives into dnsserver.Directives, once per process. It panics when the
// chain cannot be built: that is a build defect, caught by the tests, not a runtime condition.
func Install() {
	once.Do(func() {
		d, err := Order(dnsserver.Directives)
		if err != nil {
			panic(err)
		}
		dnsserver.Directives = d
	})
}
