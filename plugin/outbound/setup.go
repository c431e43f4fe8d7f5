package outbound

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"

	"github.com/miekg/dns"
)

func init() { plugin.Register("outbound", setup) }

func setup(c *caddy.Controller) error {
	o, err := parse(c)
	if err != nil {
		return plugin.Error("outbound", err)
	}
	reg := registryOf(c)
	for _, e := range o.declared {
		if err := reg.declare(e); err != nil {
			return plugin.Error("outbound", c.Err(err.Error()))
		}
	}
	o.cfg = dnsserver.GetConfig(c)
	lifecycle.Hook(c, func() error {
		if err := o.bind(reg); err != nil {
			return plugin.Error("outbound", err)
		}
		return o.start()
	}, func() error {
		o.stop()
		return nil
	})
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		o.Next = next
		return o
	})
	return nil
}

// defaultPrivate are the ranges O-1 accepts without a `private` line: RFC 1918 and RFC 6598.
var defaultPrivate = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

// parse reads one outbound block. It has no side effects: endpoints it declares are returned in
// o.declared for setup to register.
func parse(c *caddy.Controller) (*Outbound, error) {
	o := New()
	if !c.Next() { // the directive name
		return nil, c.ArgErr()
	}
	o.zones = plugin.OriginsFromArgsOrServerBlock(c.RemainingArgs(), c.ServerBlockKeys)
	if len(o.zones) == 0 {
		return nil, c.Errf("outbound needs at least one zone")
	}
	var (
		toSeen bool
		seen   = map[string]bool{}
	)
	for c.NextBlock() {
		prop := c.Val()
		switch prop {
		case "to":
			if toSeen {
				return nil, c.Errf("to given twice; list every target on one line")
			}
			toSeen = true
			args := c.RemainingArgs()
			if len(args) == 0 {
				return nil, c.Errf("to needs IPv4 addresses or one FQDN, got none")
			}
			if err := o.parseTo(c, args); err != nil {
				return nil, err
			}
		case "private":
			args := c.RemainingArgs()
			if len(args) == 0 {
				return nil, c.Errf("private needs at least one CIDR")
			}
			for _, a := range args {
				p, err := netip.ParsePrefix(a)
				if err != nil || !p.Addr().Is4() {
					return nil, c.Errf("private %q is not an IPv4 CIDR (want e.g. 172.31.0.0/16)", a)
				}
				o.private = append(o.private, p.Masked())
			}
		case "endpoint":
			args := c.RemainingArgs()
			if len(args) == 0 {
				return nil, c.Errf("endpoint needs NAME, or NAME REGION SOURCE... to declare one")
			}
			name := args[0]
			if seen[name] {
				return nil, c.Errf("endpoint %q named twice in this block", name)
			}
			seen[name] = true
			o.endpointNames = append(o.endpointNames, name)
			if len(args) == 1 {
				continue // a reference, bound at startup (O-9)
			}
			if len(args) == 2 {
				return nil, c.Errf("endpoint %s %s: needs at least one SOURCE (an IPv4 address or CIDR)", name, args[1])
			}
			e := &Endpoint{Name: name, Region: args[1]}
			for _, s := range args[2:] {
				p, err := parseSource(s)
				if err != nil {
					return nil, c.Errf("endpoint %s: source %q %v", name, s, err)
				}
				e.Sources = append(e.Sources, p)
			}
			o.declared = append(o.declared, e)
		case "source_address":
			args := c.RemainingArgs()
			if len(args) != 1 {
				return nil, c.Errf("source_address needs exactly one IPv4 address, got %d arguments", len(args))
			}
			a, err := netip.ParseAddr(args[0])
			if err != nil || !a.Is4() {
				return nil, c.Errf("source_address %q is not an IPv4 address", args[0])
			}
			o.sourceAddress = a
		case "timeout":
			args := c.RemainingArgs()
			if len(args) != 1 {
				return nil, c.Errf("timeout needs one duration, got %d arguments", len(args))
			}
			d, err := time.ParseDuration(args[0])
			if err != nil || d < minTimeout || d > maxTimeout {
				return nil, c.Errf("timeout %q out of range %s..%s", args[0], minTimeout, maxTimeout)
			}
			o.timeout = d
		case "force_tcp":
			if len(c.RemainingArgs()) != 0 {
				return nil, c.Errf("force_tcp takes no arguments")
			}
			o.forceTCP = true
		case "max_concurrent":
			args := c.RemainingArgs()
			if len(args) != 1 {
				return nil, c.Errf("max_concurrent needs one number, got %d arguments", len(args))
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 0 || n > 1_000_000 {
				return nil, c.Errf("max_concurrent %q out of range 0..1000000 (0: unbounded)", args[0])
			}
			o.maxConcurrent = int64(n)
		case "probe":
			args := c.RemainingArgs()
			if len(args) != 2 {
				return nil, c.Errf("probe needs NAME TYPE (e.g. probe corp.internal. SOA), got %d arguments", len(args))
			}
			if _, ok := dns.IsDomainName(args[0]); !ok {
				return nil, c.Errf("probe %q is not a domain name", args[0])
			}
			t, ok := dns.StringToType[strings.ToUpper(args[1])]
			if !ok || t == dns.TypeANY || t == dns.TypeAXFR || t == dns.TypeIXFR || t == dns.TypeOPT {
				return nil, c.Errf("probe type %q is not a query type (want e.g. SOA, A, NS)", args[1])
			}
			o.probeQ = dns.Question{Name: dns.CanonicalName(args[0]), Qtype: t, Qclass: dns.ClassINET}
		case "except":
			args := c.RemainingArgs()
			if len(args) == 0 {
				return nil, c.Errf("except needs at least one name")
			}
			for _, a := range args {
				n := plugin.Host(a).NormalizeExact()
				if len(n) == 0 {
					return nil, c.Errf("except %q is not a domain name", a)
				}
				o.except = append(o.except, n[0])
			}
		default:
			handled, err := o.locCfg.Parse(c)
			if err != nil {
				return nil, err
			}
			if !handled {
				return nil, c.Errf("unknown property %q (want to, private, endpoint, source_address, region, subnet, coordinates, timeout, force_tcp, max_concurrent, probe or except)", prop)
			}
		}
	}
	if o.probeQ.Name == "" {
		o.probeQ = dns.Question{Name: o.zones[0], Qtype: dns.TypeSOA, Qclass: dns.ClassINET}
	}
	var err error
	if o.probeWire, err = probeMsg(o.probeQ); err != nil {
		return nil, c.Errf("probe %s %s: %v", o.probeQ.Name, dns.TypeToString[o.probeQ.Qtype], err)
	}
	if !toSeen {
		return nil, c.Errf("outbound %s: no targets; add `to ADDRESS...` or `to FQDN`", strings.Join(o.zones, " "))
	}
	// O-3: one mechanism per zone.
	if o.sourceAddress.IsValid() && len(o.endpointNames) > 0 {
		return nil, c.Errf("source_address %s and endpoint %s given together: a zone uses the default source or endpoints, never both", o.sourceAddress, o.endpointNames[0])
	}
	// O-4: at most 100 endpoints per zone.
	if len(o.endpointNames) > maxPerZone {
		return nil, c.Errf("%d endpoints named; at most %d per zone", len(o.endpointNames), maxPerZone)
	}
	// O-4: at most 10 per region among the endpoints this block declares (the instance-wide
	// count is checked when setup registers them).
	perRegion := map[string]int{}
	for _, e := range o.declared {
		perRegion[e.Region]++
		if perRegion[e.Region] > maxPerRegion {
			return nil, c.Errf("endpoint %q: more than %d endpoints in region %s", e.Name, maxPerRegion, e.Region)
		}
	}
	// O-1: private IPv4 targets only.
	for _, t := range o.targets {
		if !o.isPrivate(t.Addr()) {
			return nil, c.Errf("to %s: public target; targets must be private (10/8, 172.16/12, 192.168/16, 100.64/10 or a `private` range)", t.Addr())
		}
	}
	// An FQDN target inside the forwarded zones is allowed: a plugin earlier in the chain (a
	// routingpolicy or file zone) or a more specific server block answers it. When nothing does,
	// the lookup reaches this plugin again and fails (see selfLookupKey) instead of looping.
	for _, ex := range o.except {
		if !o.inZones(ex) {
			return nil, c.Errf("except %s is not under the forwarded zones (%s)", ex, strings.Join(o.zones, " "))
		}
	}
	loc, err := o.locCfg.Build()
	if err != nil {
		return nil, c.Err(err.Error())
	}
	o.loc = loc
	for _, e := range o.declared {
		if _, err := loc.Table.Resolve(e.Region); err != nil {
			return nil, c.Errf("endpoint %s: %v", e.Name, err)
		}
	}
	if c.Next() {
		return nil, c.Errf("outbound given twice in this server block; use one block with several zones")
	}
	return o, nil
}

// parseTo reads the targets: IPv4 addresses with an optional port, or exactly one FQDN with an
// optional port (O-8).
func (o *Outbound) parseTo(c *caddy.Controller, args []string) error {
	for _, a := range args {
		host, port, err := splitPort(a)
		if err != nil {
			return c.Errf("to %q: %v", a, err)
		}
		ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
		if err == nil {
			if !ip.Is4() {
				return c.Errf("to %s: IPv6 target; targets must be IPv4", a)
			}
			t := netip.AddrPortFrom(ip, port)
			if slices.Contains(o.targets, t) {
				return c.Errf("to %s given twice", a)
			}
			o.targets = append(o.targets, t)
			continue
		}
		if len(args) != 1 {
			return c.Errf("to %q: an FQDN target must be the only target", a)
		}
		if _, ok := dns.IsDomainName(host); !ok || strings.Contains(host, "/") || dns.CountLabel(host) < 1 {
			return c.Errf("to %q is neither an IPv4 address nor a domain name", a)
		}
		o.fqdn = dns.CanonicalName(host)
		o.fqdnPort = port
	}
	return nil
}

// splitPort splits "host[:port]", default port 53. IPv6 literals are recognised so they can be
// refused with a clear message.
func splitPort(s string) (string, uint16, error) {
	if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		return s, 53, nil // bare IPv6
	}
	i := strings.LastIndex(s, ":")
	if i < 0 || strings.HasSuffix(s, "]") {
		return s, 53, nil
	}
	p, err := strconv.Atoi(s[i+1:])
	if err != nil || p < 1 || p > 65535 {
		return "", 0, fmt.Errorf("port %q out of range 1..65535", s[i+1:])
	}
	return s[:i], uint16(p), nil // #nosec G115 -- range checked
}

// parseSource reads an endpoint source: an IPv4 address or CIDR.
func parseSource(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return netip.Prefix{}, fmt.Errorf("is not an IPv4 address or CIDR")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Prefix{}, fmt.Errorf("is not an IPv4 address or CIDR")
	}
	return netip.PrefixFrom(a, 32), nil
}

func (o *Outbound) isPrivate(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	for _, p := range defaultPrivate {
		if p.Contains(a) {
			return true
		}
	}
	for _, p := range o.private {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (o *Outbound) inZones(name string) bool {
	for _, z := range o.zones {
		if subdomain(z, name) {
			return true
		}
	}
	return false
}
