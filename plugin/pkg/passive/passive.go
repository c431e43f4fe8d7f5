// Package passive gives a plugin that answers no query (healthcheck, pschealth) what CoreDNS only
// gives to handlers: a place in the server block's registry, where the ready plugin finds its
// Readiness and other plugins look it up by name. The handler it adds is the next plugin's
// ServeDNS under the plugin's name: one small frame (the method wrapper of the embedded
// interface, 48 bytes) on the query path, and no wrapped writer.
//
// A plugin in the chain the usual way (ServeDNS calling plugin.NextOrFailure) puts two frames
// (about 280 bytes) on every query's goroutine stack; with healthcheck and pschealth before
// routingpolicy that was enough to make the per-query goroutine grow its stack a second time
// (commit af9c6bd: runtime.newstack 21-27 % of the server's CPU before, about 6 % after, in
// bench/profile routingpolicy-policy.Corefile wrr.txt 8).
package passive

import (
	"context"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"

	"github.com/miekg/dns"
)

// Add registers a handler named name in the server block of c: queries go straight to the next
// plugin, and the ready plugin asks ready.
func Add(c *caddy.Controller, name string, ready func() bool) {
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		return New(name, ready, next)
	})
}

// New returns the handler Add adds in front of next.
func New(name string, ready func() bool, next plugin.Handler) plugin.Handler {
	if next == nil {
		return &last{name: name, ready: ready}
	}
	return &handler{Handler: next, name: name, ready: ready}
}

// handler is next under another name: its ServeDNS is next's.
type handler struct {
	plugin.Handler
	name  string
	ready func() bool
}

func (h *handler) Name() string { return h.name }

// Ready implements the ready.Readiness interface.
func (h *handler) Ready() bool { return h.ready() }

// last stands where no plugin follows: the query fails as plugin.NextOrFailure fails it.
type last struct {
	name  string
	ready func() bool
}

func (l *last) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	return plugin.NextOrFailure(l.name, nil, ctx, w, r)
}

func (l *last) Name() string { return l.name }

// Ready implements the ready.Readiness interface.
func (l *last) Ready() bool { return l.ready() }
