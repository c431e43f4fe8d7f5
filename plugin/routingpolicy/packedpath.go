package routingpolicy

import (
	"github.com/coredns/coredns/core/dnsserver"
)

// passThrough are the plugins that may run before routingpolicy in a server block while its
// answers are written as packed bytes (writePacked): none of them wraps the ResponseWriter, so
// none needs the dns.Msg of an answer. They set context or metadata (metadata, geoip, cancel,
// healthcheck, pschealth), change the query's buffer size before we read it (bufsize), log the
// errors a handler returns (errors), or answer other queries themselves and pass ours on
// untouched (local, any, chaos, acl). udpbatch wraps the writer to queue what is written, with
// Write as with WriteMsg.
var passThrough = map[string]bool{
	"metadata": true, "geoip": true, "cancel": true, "bufsize": true, "errors": true,
	"local": true, "any": true, "chaos": true, "acl": true,
	"healthcheck": true, "pschealth": true, "udpbatch": true,
}

// packedPath reports whether answers in the server block of conf may be written as packed bytes,
// and if not, why. Every plugin before us in the chain (dnsserver.Directives is the chain's
// order) must be one of passThrough: any other may wrap the ResponseWriter to see, change or
// count the dns.Msg (log, prometheus, cache, dnssec, rewrite, nsid, dnstap, trace...), which
// bytes written with Write would pass by. A UDP writer decorator (shed, or udpbatch before it
// batches Write) sees only what WriteMsg writes: miekg/dns's Write bypasses it. OnStartup decides
// once, so the query path pays nothing for it.
func packedPath(conf *dnsserver.Config) (ok bool, why string) {
	for _, name := range dnsserver.Directives {
		if name == "routingpolicy" {
			break
		}
		if conf.Handler(name) != nil && !passThrough[name] {
			return false, "plugin " + name + " is before routingpolicy in the server block"
		}
	}
	if conf.UDPDecorateWriterFunc != nil && conf.Handler("udpbatch") == nil {
		return false, "a plugin decorates the server block's UDP writer"
	}
	return true, ""
}
