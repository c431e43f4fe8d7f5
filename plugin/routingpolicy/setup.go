package routingpolicy

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/fall"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/coresteer/coresteer/plugin/pkg/health"
	"github.com/coresteer/coresteer/plugin/pkg/lifecycle"
	"github.com/coresteer/coresteer/plugin/pkg/region"
	"github.com/coresteer/coresteer/plugin/pkg/statusview"

	"github.com/miekg/dns"
)

var log = clog.NewWithPlugin("routingpolicy")

func init() { plugin.Register("routingpolicy", setup) }

// Config is what one routingpolicy block says.
type Config struct {
	Zones      []string
	Public     bool
	Region     region.Config
	Locator    *region.Locator
	ZoneFile   string
	RecordSets string
	Reload     time.Duration
	Records    []dns.RR
	Sets       []*setSpec
	Log        bool
	Fall       fall.F
}

func setup(c *caddy.Controller) error {
	cfgs, err := parse(c)
	if err != nil {
		return plugin.Error("routingpolicy", err)
	}
	demand := health.DemandOf(c)
	for _, cfg := range cfgs {
		d, err := cfg.load(time.Now())
		if err != nil {
			return plugin.Error("routingpolicy", err)
		}
		// The health plugins set up before us (chain order), so every check of this Corefile is
		// defined by now. The checked addresses are wanted probed from OnStartup on.
		if err := d.checkChecks(demand); err != nil {
			return plugin.Error("routingpolicy", err)
		}
		rp := New(cfg, d)
		rp.demand = demand
		rp.gen = lifecycle.Generation(c)
		rp.server = statusview.ServerOf(c)
		conf := dnsserver.GetConfig(c)
		lifecycle.Hook(c, func() error { return rp.OnStartup(conf) }, rp.OnShutdown)
		statusview.Register(c, rp)
		conf.AddPlugin(func(next plugin.Handler) plugin.Handler {
			rp.Next = next
			return rp
		})
	}
	return nil
}

// parse reads every routingpolicy block of c. It reads no files; load does.
func parse(c *caddy.Controller) ([]*Config, error) {
	var out []*Config
	for c.Next() {
		cfg, err := parseBlock(c)
		if err != nil {
			return nil, err
		}
		out = append(out, cfg)
	}
	return out, nil
}

func parseBlock(c *caddy.Controller) (*Config, error) {
	cfg := &Config{Reload: 30 * time.Second}
	cfg.Zones = plugin.OriginsFromArgsOrServerBlock(c.RemainingArgs(), c.ServerBlockKeys)
	if len(cfg.Zones) == 0 {
		return nil, c.Errf("no zone given")
	}
	for i := range cfg.Zones {
		cfg.Zones[i] = canonicalName(cfg.Zones[i])
	}
	origin := cfg.Zones[0]
	seen := map[string]bool{}
	for c.NextBlock() {
		prop := c.Val()
		switch prop {
		case "public":
			if c.NextArg() {
				return nil, c.ArgErr()
			}
			cfg.Public = true
		case "log":
			if c.NextArg() {
				return nil, c.ArgErr()
			}
			cfg.Log = true
		case "fallthrough":
			cfg.Fall.SetZonesFromArgs(c.RemainingArgs())
		case "zonefile", "recordsets":
			args := c.RemainingArgs()
			if len(args) != 1 {
				return nil, c.Errf("%s needs one FILE, got %d arguments", prop, len(args))
			}
			if seen[prop] {
				return nil, c.Errf("%s given twice", prop)
			}
			seen[prop] = true
			// A relative path is relative to the root directive's directory, as for file.
			f := args[0]
			if root := dnsserver.GetConfig(c).Root; !filepath.IsAbs(f) && root != "" {
				f = filepath.Join(root, f)
			}
			if prop == "zonefile" {
				cfg.ZoneFile = f
			} else {
				cfg.RecordSets = f
			}
		case "reload":
			args := c.RemainingArgs()
			if len(args) != 1 {
				return nil, c.ArgErr()
			}
			d, err := time.ParseDuration(args[0])
			if err != nil || d < 0 {
				return nil, c.Errf("reload %q is not a duration >= 0 (e.g. 30s, 0 to turn reloading off)", args[0])
			}
			if d > 0 && d < time.Second {
				return nil, c.Errf("reload %s is below the minimum of 1s (0 turns reloading off)", args[0])
			}
			cfg.Reload = d
		case "record":
			rr, err := parseRecord(c.RemainingArgs(), origin)
			if err != nil {
				return nil, c.Errf("%v", err)
			}
			cfg.Records = append(cfg.Records, rr)
		case "wrr", "geo", "failover":
			s, err := parseSet(prop, c.RemainingArgs(), origin)
			if err != nil {
				return nil, c.Errf("%v", err)
			}
			s.origin = fmt.Sprintf("%s:%d", c.File(), c.Line())
			cfg.Sets = append(cfg.Sets, s)
		default:
			handled, err := cfg.Region.Parse(c)
			if err != nil {
				return nil, err
			}
			if !handled {
				return nil, c.Errf("unknown property %q", prop)
			}
		}
	}
	loc, err := cfg.Region.Build()
	if err != nil {
		return nil, c.Errf("%v", err)
	}
	cfg.Locator = loc
	return cfg, nil
}

// parseRecord parses `record NAME TYPE TTL RDATA...`.
func parseRecord(args []string, origin string) (dns.RR, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("record needs NAME TYPE TTL RDATA, got %d arguments", len(args))
	}
	name := relName(args[0], origin)
	qtype, ok := dns.StringToType[strings.ToUpper(args[1])]
	if !ok {
		return nil, fmt.Errorf("record %s: unknown type %q", args[0], args[1])
	}
	ttl, err := parseTTL(args[2])
	if err != nil {
		return nil, fmt.Errorf("record %s: %v", args[0], err)
	}
	rdata := args[3:]
	if qtype == dns.TypeTXT {
		// The Corefile lexer strips quotes: put them back so "two words" stays one string.
		q := make([]string, len(rdata))
		for i, s := range rdata {
			q[i] = strconv.Quote(s)
		}
		rdata = q
	}
	rr, err := newRR(name, ttl, qtype, strings.Join(rdata, " "), origin)
	if err != nil {
		return nil, fmt.Errorf("record %s %s: %v", args[0], args[1], err)
	}
	return rr, nil
}

func parseTTL(s string) (uint32, error) {
	ttl, err := strconv.ParseUint(s, 10, 32)
	if err != nil || ttl > 2147483647 {
		return 0, fmt.Errorf("TTL %q is not a number of seconds in 0..2147483647", s)
	}
	return uint32(ttl), nil
}

// parseSet parses the arguments of a wrr, geo or failover line.
func parseSet(prop string, args []string, origin string) (*setSpec, error) {
	need := 4
	if prop == "failover" {
		need = 5
	}
	if len(args) < need {
		want := "NAME TYPE TTL DATA"
		if prop == "failover" {
			want = "NAME TYPE TTL PRIMARY BACKUP"
		}
		return nil, fmt.Errorf("%s needs %s, got %d arguments", prop, want, len(args))
	}
	s := &setSpec{name: relName(args[0], origin), rdOrigin: origin}
	switch prop {
	case "wrr":
		s.kind = WRR
	case "geo":
		s.kind = Geo
	case "failover":
		s.kind = Failover
	}
	qtype, ok := dns.StringToType[strings.ToUpper(args[1])]
	if !ok || !policyTypes[qtype] {
		return nil, fmt.Errorf("%s %s: type %q cannot carry a policy (allowed: A, AAAA, CNAME, MX, SRV, TXT)", prop, args[0], args[1])
	}
	s.qtype = qtype
	ttl, err := parseTTL(args[2])
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", prop, args[0], err)
	}
	s.ttl = ttl
	switch s.kind {
	case WRR:
		items, err := parseData(args[3])
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", prop, args[0], err)
		}
		for _, it := range items {
			w, err := strconv.ParseFloat(it.key, 64)
			// R-WRR-1: weights 0..1000 inclusive.
			if err != nil || w < 0 || w > 1000 || w != w {
				return nil, fmt.Errorf("%s %s: weight %q out of range 0..1000", prop, args[0], it.key)
			}
			s.items = append(s.items, itemSpec{weight: w, rdata: it.rdata})
		}
	case Geo:
		items, err := parseData(args[3])
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", prop, args[0], err)
		}
		for _, it := range items {
			s.items = append(s.items, itemSpec{location: it.key, rdata: it.rdata})
		}
	case Failover:
		primary, err := parseList(args[3])
		if err != nil {
			return nil, fmt.Errorf("%s %s: primary: %v", prop, args[0], err)
		}
		s.items = []itemSpec{{rdata: primary}}
		backup, err := parseData(args[4])
		if err != nil {
			return nil, fmt.Errorf("%s %s: backup: %v", prop, args[0], err)
		}
		for _, it := range backup {
			s.backup = append(s.backup, itemSpec{location: it.key, rdata: it.rdata})
		}
	}
	rest := args[need:]
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case "healthcheck":
			if i+1 >= len(rest) || s.check != "" {
				return nil, fmt.Errorf("%s %s: healthcheck needs one CHECK name", prop, args[0])
			}
			s.check = rest[i+1]
			i++
		case "fence":
			if s.kind == WRR {
				return nil, fmt.Errorf("%s %s: fence applies to geo and failover only", prop, args[0])
			}
			s.fence = true
		case "trickle":
			if s.kind != Failover {
				return nil, fmt.Errorf("%s %s: trickle applies to failover only", prop, args[0])
			}
			if i+1 >= len(rest) {
				return nil, fmt.Errorf("%s %s: trickle needs a RATIO in 0..1", prop, args[0])
			}
			r, err := strconv.ParseFloat(rest[i+1], 64)
			// R-FO-3: a ratio 0..1.
			if err != nil || r < 0 || r > 1 || r != r {
				return nil, fmt.Errorf("%s %s: trickle %q out of range 0..1", prop, args[0], rest[i+1])
			}
			s.trickle = r
			i++
		default:
			return nil, fmt.Errorf("%s %s: unknown option %q (allowed: healthcheck CHECK, fence, trickle RATIO)", prop, args[0], rest[i])
		}
	}
	return s, nil
}
