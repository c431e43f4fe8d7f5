package region

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/coredns/caddy"
)

// Config is what the location sub-directives of a plugin block say. routingpolicy and outbound
// both call Parse from their block loop, so the syntax is the same in both:
//
//	region NAME                   # the region this server runs in
//	subnet REGION CIDR...         # clients in these subnets are in REGION
//	coordinates REGION LAT LON    # a custom region, or override a built-in one
type Config struct {
	Server  string
	Subnets []Subnet
	Coords  map[string]Coord
}

// Subnet puts the clients of Prefix in Region.
type Subnet struct {
	Region string
	Prefix netip.Prefix
}

// Parse handles the current token of c when it is a location sub-directive. It returns false,
// nil when the token is not one, so the caller can report it as unknown.
func (cfg *Config) Parse(c *caddy.Controller) (bool, error) {
	switch c.Val() {
	case "region":
		args := c.RemainingArgs()
		if len(args) != 1 {
			return true, c.ArgErr()
		}
		if cfg.Server != "" {
			return true, c.Errf("region given twice (%q and %q)", cfg.Server, args[0])
		}
		cfg.Server = args[0]
	case "subnet":
		args := c.RemainingArgs()
		if len(args) < 2 {
			return true, c.Errf("subnet needs a region and at least one CIDR, got %d arguments", len(args))
		}
		for _, s := range args[1:] {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return true, c.Errf("subnet %s: %q is not a CIDR (want e.g. 10.1.0.0/16 or 2001:db8::/32)", args[0], s)
			}
			cfg.Subnets = append(cfg.Subnets, Subnet{Region: args[0], Prefix: p.Masked()})
		}
	case "coordinates":
		args := c.RemainingArgs()
		if len(args) != 3 {
			return true, c.Errf("coordinates needs REGION LAT LON, got %d arguments", len(args))
		}
		lat, err := strconv.ParseFloat(args[1], 64)
		if err != nil || lat < -90 || lat > 90 {
			return true, c.Errf("coordinates %s: latitude %q out of range -90..90", args[0], args[1])
		}
		lon, err := strconv.ParseFloat(args[2], 64)
		if err != nil || lon < -180 || lon > 180 {
			return true, c.Errf("coordinates %s: longitude %q out of range -180..180", args[0], args[2])
		}
		if cfg.Coords == nil {
			cfg.Coords = make(map[string]Coord)
		}
		cfg.Coords[args[0]] = Coord{Lat: lat, Lon: lon}
	default:
		return false, nil
	}
	return true, nil
}

// Build checks every region name and returns the Locator. A subnet given twice for two regions
// is an error; the same subnet twice for one region is not.
func (cfg *Config) Build() (*Locator, error) {
	t := NewTable(cfg.Coords)
	server := None
	if cfg.Server != "" {
		id, err := t.Resolve(cfg.Server)
		if err != nil {
			return nil, fmt.Errorf("region: %w", err)
		}
		server = id
	}
	nets := make(map[netip.Prefix]ID, len(cfg.Subnets))
	for _, s := range cfg.Subnets {
		id, err := t.Resolve(s.Region)
		if err != nil {
			return nil, fmt.Errorf("subnet: %w", err)
		}
		if prev, ok := nets[s.Prefix]; ok && prev != id {
			return nil, fmt.Errorf("subnet %s given for two regions (%s and %s)", s.Prefix, t.Name(prev), s.Region)
		}
		nets[s.Prefix] = id
	}
	return newLocator(t, server, nets), nil
}
