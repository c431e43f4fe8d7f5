package routingpolicy

import (
	"context"
	"strings"
	"testing"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/chain"

	"github.com/miekg/dns"
)

// stub is a handler that stands for the plugin it is named after in a chain.
type stub struct {
	name string
	next plugin.Handler
}

func (s *stub) Name() string { return s.name }

func (s *stub) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	return plugin.NextOrFailure(s.name, s.next, ctx, w, r)
}

// blockOf returns the config of a server block whose chain has handlers named names, in the
// chain's order, as dnsserver builds it (which registers every handler by name).
func blockOf(t *testing.T, decorated bool, names ...string) *dnsserver.Config {
	t.Helper()
	chain.Install()
	conf := &dnsserver.Config{Zone: "example.org.", Port: "53"}
	if decorated {
		conf.UDPDecorateWriterFunc = func(*dnsserver.Server) dns.DecorateWriter { return nil }
	}
	for _, n := range names {
		conf.AddPlugin(func(next plugin.Handler) plugin.Handler { return &stub{name: n, next: next} })
	}
	if _, err := dnsserver.NewServer("dns://:53", []*dnsserver.Config{conf}); err != nil {
		t.Fatal(err)
	}
	return conf
}

// TestPackedPathChain: answers are written as packed bytes only when no plugin before
// routingpolicy in the server block can need their dns.Msg: the ones that wrap the
// ResponseWriter (log, prometheus, cache, dnssec...) and any plugin it does not know make it use
// WriteMsg; plugins after it never see its answers; a UDP writer decorator needs WriteMsg unless
// it is udpbatch's, whose handler queues what Write writes too.
func TestPackedPathChain(t *testing.T) {
	for _, tc := range []struct {
		names     []string
		decorated bool
		packed    bool
		why       string // what the reason names when not packed
	}{
		{names: []string{"routingpolicy"}, packed: true},
		{names: []string{"metadata", "geoip", "cancel", "bufsize", "errors", "local", "any", "chaos", "acl", "healthcheck", "pschealth", "routingpolicy", "file", "forward"}, packed: true},
		{names: []string{"routingpolicy", "outbound", "file", "forward", "loop"}, packed: true},
		{names: []string{"prometheus", "errors", "routingpolicy"}, why: "prometheus"},
		{names: []string{"errors", "log", "routingpolicy"}, why: "log"},
		{names: []string{"cache", "routingpolicy"}, why: "cache"},
		{names: []string{"metadata", "dnssec", "routingpolicy"}, why: "dnssec"},
		{names: []string{"rewrite", "routingpolicy"}, why: "rewrite"},
		{names: []string{"nsid", "routingpolicy"}, why: "nsid"},
		{names: []string{"dnstap", "routingpolicy"}, why: "dnstap"},
		{names: []string{"trace", "routingpolicy"}, why: "trace"},
		{names: []string{"header", "routingpolicy"}, why: "header"},
		{names: []string{"minimal", "routingpolicy"}, why: "minimal"},
		{names: []string{"loadbalance", "routingpolicy"}, why: "loadbalance"},
		{names: []string{"tsig", "routingpolicy"}, why: "tsig"},
		{names: []string{"hosts", "routingpolicy"}, why: "hosts"}, // any plugin it does not know
		{names: []string{"shed", "routingpolicy"}, decorated: true, why: "shed"},
		{names: []string{"routingpolicy"}, decorated: true, why: "decorates"},
		{names: []string{"udpbatch", "routingpolicy"}, decorated: true, packed: true},
	} {
		// AddPlugin takes the chain from the outside in: the first name is the first handler.
		conf := blockOf(t, tc.decorated, tc.names...)
		ok, why := packedPath(conf)
		if ok != tc.packed {
			t.Errorf("%v (UDP writer decorated: %v): packed %v (%s), want %v", tc.names, tc.decorated, ok, why, tc.packed)
			continue
		}
		if !ok && !strings.Contains(why, tc.why) {
			t.Errorf("%v: the reason %q does not name what needs WriteMsg", tc.names, why)
		}
	}
}
