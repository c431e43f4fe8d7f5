package region

import (
	"math"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/miekg/dns"
)

// L-3: the built-in table carries every Google Cloud region (and common AWS / Azure ones).
func TestBuiltinRegions(t *testing.T) {
	tab := NewTable(nil)
	for _, n := range []string{"us-east1", "us-central1", "europe-west1", "asia-southeast1",
		"australia-southeast1", "southamerica-east1", "me-central2", "africa-south1",
		"us-east-1", "eu-west-1", "westeurope"} {
		if _, ok := tab.Lookup(n); !ok {
			t.Errorf("built-in region %s missing", n)
		}
	}
	for n, c := range builtin {
		if c.Lat < -90 || c.Lat > 90 || c.Lon < -180 || c.Lon > 180 {
			t.Errorf("region %s has coordinates out of range: %+v", n, c)
		}
	}
}

// L-3: nearest means great-circle distance.
func TestGreatCircle(t *testing.T) {
	// London to Paris is about 344 km; New York to London about 5570 km.
	london, paris, ny := Coord{51.5074, -0.1278}, Coord{48.8566, 2.3522}, Coord{40.7128, -74.0060}
	for _, tc := range []struct {
		a, b Coord
		want float64
	}{{london, paris, 344}, {ny, london, 5570}, {london, london, 0}} {
		if got := greatCircle(tc.a, tc.b); math.Abs(got-tc.want) > tc.want*0.01+1 {
			t.Errorf("distance %+v-%+v = %.0f km, want about %.0f", tc.a, tc.b, got, tc.want)
		}
	}
	// Across the antimeridian: Tokyo to Los Angeles is shorter over the Pacific (~8800 km).
	if got := greatCircle(Coord{35.68, 139.69}, Coord{34.05, -118.24}); got > 9000 || got < 8600 {
		t.Errorf("Tokyo-Los Angeles = %.0f km, want about 8800", got)
	}
}

// L-3: nearest-first ordering from a source region.
func TestNearestFirst(t *testing.T) {
	tab := NewTable(nil)
	ids := func(names ...string) []ID {
		out := make([]ID, len(names))
		for i, n := range names {
			out[i], _ = tab.Lookup(n)
		}
		return out
	}
	cands := ids("asia-southeast1", "us-east1", "europe-west1", "us-central1")
	from, _ := tab.Lookup("us-east4")
	order := tab.NearestFirst(from, cands)
	got := make([]string, 0, len(order))
	for _, i := range order {
		got = append(got, tab.Name(cands[i]))
	}
	want := "us-east1 us-central1 europe-west1 asia-southeast1"
	if strings.Join(got, " ") != want {
		t.Fatalf("nearest first from us-east4 = %v, want %s", got, want)
	}
	// From no region every candidate is equally far: the given order stays.
	order = tab.NearestFirst(None, cands)
	for i, o := range order {
		if o != i {
			t.Fatalf("order from None = %v, want the given order", order)
		}
	}
}

func parseConfig(t *testing.T, input string) (*Config, error) {
	t.Helper()
	c := caddy.NewTestController("dns", input)
	cfg := &Config{}
	for c.Next() {
		for c.NextBlock() {
			ok, err := cfg.Parse(c)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, c.Errf("unknown property %q", c.Val())
			}
		}
	}
	return cfg, nil
}

func TestParse(t *testing.T) {
	tests := []struct {
		input   string
		wantErr string // substring; "" means no error (at parse or build)
	}{
		{"p {\n region us-east1\n subnet europe-west1 10.1.0.0/16 10.2.0.0/16\n subnet onprem 192.168.0.0/24\n coordinates onprem 40.4 -3.7\n}", ""},
		{"p {\n region us-east1 us-west1\n}", "Wrong argument count"},
		{"p {\n region us-east1\n region us-west1\n}", "region given twice"},
		{"p {\n subnet europe-west1\n}", "subnet needs a region and at least one CIDR"},
		{"p {\n subnet europe-west1 10.1.0.0\n}", `"10.1.0.0" is not a CIDR`},
		{"p {\n coordinates x 91 0\n}", "latitude \"91\" out of range -90..90"},
		{"p {\n coordinates x 0 -181\n}", "longitude \"-181\" out of range -180..180"},
		{"p {\n coordinates x north 0\n}", "latitude \"north\" out of range"},
		{"p {\n coordinates x 1\n}", "coordinates needs REGION LAT LON"},
		{"p {\n region us-eats1\n}", `unknown region "us-eats1" (did you mean us-east1`},
		{"p {\n subnet europe-wset1 10.0.0.0/8\n}", `unknown region "europe-wset1" (did you mean europe-west1`},
		{"p {\n subnet us-east1 10.0.0.0/8\n subnet us-west1 10.0.0.0/8\n}", "given for two regions"},
	}
	for _, tc := range tests {
		cfg, err := parseConfig(t, tc.input)
		if err == nil {
			_, err = cfg.Build()
		}
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: unexpected error %v", tc.input, err)
		case tc.wantErr != "" && err == nil:
			t.Errorf("%q: no error, want %q", tc.input, tc.wantErr)
		case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
			t.Errorf("%q: error %q, want it to contain %q", tc.input, err, tc.wantErr)
		}
	}
}

// The region of a replica comes from its environment, as any Corefile value can.
func TestParseEnvRegion(t *testing.T) {
	t.Setenv("CORESTEER_TEST_REGION", "asia-southeast1")
	blocks, err := caddyfile.Parse("Corefile", strings.NewReader("p {\n region {$CORESTEER_TEST_REGION}\n}"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := caddy.NewTestController("dns", "")
	c.Dispenser = caddyfile.NewDispenserTokens("Corefile", blocks[0].Tokens["region"])
	cfg := &Config{}
	for c.Next() {
		if _, err := cfg.Parse(c); err != nil {
			t.Fatal(err)
		}
	}
	l, err := cfg.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Table.Name(l.Server()); got != "asia-southeast1" {
		t.Fatalf("server region = %q, want asia-southeast1 from the environment", got)
	}
}

func testLocator(t *testing.T) *Locator {
	t.Helper()
	cfg, err := parseConfig(t, `p {
		region us-east1
		subnet europe-west1 10.0.0.0/8
		subnet asia-southeast1 10.1.0.0/16
		subnet onprem 10.1.2.0/24 2001:db8::/32
		coordinates onprem 40.4 -3.7
	}`)
	if err != nil {
		t.Fatal(err)
	}
	l, err := cfg.Build()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// L-2: longest prefix wins; else the server's own region.
func TestRegionLongestPrefix(t *testing.T) {
	l := testLocator(t)
	for _, tc := range []struct{ addr, want string }{
		{"10.9.9.9", "europe-west1"},
		{"10.1.9.9", "asia-southeast1"},
		{"10.1.2.3", "onprem"},
		{"::ffff:10.1.2.3", "onprem"},
		{"2001:db8::1", "onprem"},
		{"192.0.2.1", "us-east1"},
		{"2001:db9::1", "us-east1"},
	} {
		if got := l.Table.Name(l.Region(netip.MustParseAddr(tc.addr))); got != tc.want {
			t.Errorf("region of %s = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

func query(ecs string, prefix uint8) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion("www.example.org.", dns.TypeA)
	if ecs != "" {
		o := new(dns.OPT)
		o.Hdr.Name = "."
		o.Hdr.Rrtype = dns.TypeOPT
		e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: prefix, Address: net.ParseIP(ecs).To4()}
		o.Option = append(o.Option, e)
		m.Extra = append(m.Extra, o)
	}
	return m
}

// L-1: public zones use ECS with a source prefix above 0; private zones ignore it.
func TestLocateECS(t *testing.T) {
	l := testLocator(t)
	client := &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 5353}

	id, src := l.Locate(client, query("10.1.2.0", 24), true)
	if l.Table.Name(id) != "onprem" || src.ECS == nil {
		t.Fatalf("public with ECS: region %s ecs %v, want onprem from ECS", l.Table.Name(id), src.ECS)
	}
	id, src = l.Locate(client, query("10.1.2.0", 24), false)
	if l.Table.Name(id) != "us-east1" || src.ECS != nil {
		t.Fatalf("private with ECS: region %s ecs %v, want us-east1 from the client", l.Table.Name(id), src.ECS)
	}
	id, src = l.Locate(client, query("10.1.2.0", 0), true)
	if l.Table.Name(id) != "us-east1" || src.ECS != nil {
		t.Fatalf("public with ECS /0: region %s, want the client's", l.Table.Name(id))
	}
	id, _ = l.Locate(&net.TCPAddr{IP: net.ParseIP("10.9.0.1")}, query("", 0), true)
	if l.Table.Name(id) != "europe-west1" {
		t.Fatalf("TCP client region %s, want europe-west1", l.Table.Name(id))
	}
}

// L-1: answers that used ECS carry the scope (RFC 7871).
func TestScopeOption(t *testing.T) {
	m := query("10.1.2.0", 24)
	e := m.IsEdns0().Option[0].(*dns.EDNS0_SUBNET)
	s := ScopeOption(e)
	if s.SourceScope != 24 || s.SourceNetmask != 24 || s.Family != 1 || !s.Address.Equal(e.Address) {
		t.Fatalf("scope option = %+v", s)
	}
}

func BenchmarkLocate(b *testing.B) {
	cfg := &Config{Server: "us-east1", Subnets: []Subnet{
		{Region: "europe-west1", Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		{Region: "asia-southeast1", Prefix: netip.MustParsePrefix("10.1.0.0/16")},
		{Region: "us-west1", Prefix: netip.MustParsePrefix("10.1.2.0/24")},
	}}
	l, err := cfg.Build()
	if err != nil {
		b.Fatal(err)
	}
	client := &net.UDPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5353}
	r := query("10.1.2.0", 24)
	b.ReportAllocs()
	for b.Loop() {
		if id, _ := l.Locate(client, r, true); id == None {
			b.Fatal("no region")
		}
	}
}

// L-2, S-2: Subnet names the configured subnet that placed an address (the longest), and no
// subnet when the server's own region was used; Region agrees with it.
func TestSubnetMatched(t *testing.T) {
	cfg := &Config{Server: "us-east1", Subnets: []Subnet{
		{Region: "europe-west1", Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		{Region: "us-west1", Prefix: netip.MustParsePrefix("10.1.2.0/24")},
	}}
	l, err := cfg.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr, region, subnet string
	}{
		{"10.1.2.3", "us-west1", "10.1.2.0/24"},
		{"10.9.0.1", "europe-west1", "10.0.0.0/8"},
		{"192.0.2.1", "us-east1", ""},
		{"::ffff:10.1.2.3", "us-west1", "10.1.2.0/24"},
	} {
		a := netip.MustParseAddr(tc.addr)
		id, p := l.Subnet(a)
		got := ""
		if p.IsValid() {
			got = p.String()
		}
		if l.Table.Name(id) != tc.region || got != tc.subnet {
			t.Errorf("Subnet(%s) = %s, %q; want %s, %q", tc.addr, l.Table.Name(id), got, tc.region, tc.subnet)
		}
		if l.Region(a) != id {
			t.Errorf("Region(%s) = %v, Subnet says %v", tc.addr, l.Region(a), id)
		}
	}
}
