package outbound

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/coredns/caddy"

	"github.com/miekg/dns"
)

func TestParse(t *testing.T) {
	o, err := parse(caddy.NewTestController("dns", `outbound example.org corp.internal {
		to 10.0.0.1 10.0.0.2:5353
		endpoint eu europe-west1 10.1.0.0/24 10.1.1.7
		endpoint hub
		region europe-west1
		subnet us-east1 10.9.0.0/16
		timeout 2s
		force_tcp
		max_concurrent 50
		except a.example.org
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.zones) != 2 || o.zones[0] != "example.org." {
		t.Errorf("zones %v", o.zones)
	}
	if len(o.targets) != 2 || o.targets[1].Port() != 5353 || o.targets[0].Port() != 53 {
		t.Errorf("targets %v", o.targets)
	}
	if len(o.declared) != 1 || len(o.declared[0].Sources) != 2 || o.declared[0].Sources[1].Bits() != 32 {
		t.Errorf("declared %+v", o.declared)
	}
	if len(o.endpointNames) != 2 || o.endpointNames[1] != "hub" {
		t.Errorf("names %v", o.endpointNames)
	}
	if o.timeout.Seconds() != 2 || !o.forceTCP || o.maxConcurrent != 50 || o.except[0] != "a.example.org." {
		t.Errorf("options %+v", o)
	}

	o, err = parse(caddy.NewTestController("dns", `outbound . {
		to resolvers.corp.internal:5353
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if o.fqdn != "resolvers.corp.internal." || o.fqdnPort != 5353 {
		t.Errorf("fqdn %q port %d", o.fqdn, o.fqdnPort)
	}
	if o.timeout != defaultTimeout || o.maxConcurrent != defaultMaxConcurrent {
		t.Errorf("defaults: timeout %v max_concurrent %d", o.timeout, o.maxConcurrent)
	}
	if q := o.probeQ; q.Name != "." || q.Qtype != dns.TypeSOA {
		t.Errorf("default probe question %v, want the zone apex SOA", q)
	}
}

// Every parse error, with the words it must contain.
func TestParseErrors(t *testing.T) {
	many := func(n int, region string, prefix string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "endpoint %s%d %s 10.2.%d.1\n", prefix, i, region, i%250)
		}
		return b.String()
	}
	refs := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "endpoint r%d\n", i)
		}
		return b.String()
	}
	tests := []struct {
		name, input, want string
	}{
		{"no targets", `outbound example.org { }`, "no targets"},
		{"to empty", `outbound example.org { to }`, "to needs"},
		{"target twice", `outbound example.org { to 10.0.0.1 10.0.0.1:53 }`, "to 10.0.0.1:53 given twice"},
		{"to twice", "outbound example.org {\nto 10.0.0.1\nto 10.0.0.2\n}", "to given twice"},
		// O-1
		{"public target", `outbound example.org { to 8.8.8.8 }`, "8.8.8.8: public target"},
		{"public with port", `outbound example.org { to 1.1.1.1:53 }`, "public target"},
		{"ipv6 target", `outbound example.org { to fd00::1 }`, "IPv6 target"},
		{"ipv6 bracket target", `outbound example.org { to [fd00::1]:53 }`, "IPv6 target"},
		{"loopback not private by default", `outbound example.org { to 127.0.0.1 }`, "public target"},
		{"bad port", `outbound example.org { to 10.0.0.1:99999 }`, "port \"99999\" out of range"},
		{"fqdn with ips", `outbound example.org { to 10.0.0.1 a.example.com }`, "must be the only target"},
		{"not a name", `outbound example.org { to a..b }`, "neither an IPv4 address nor a domain name"},
		{"private bad", `outbound example.org { to 10.0.0.1
			private 8.8.8.8 }`, "private \"8.8.8.8\" is not an IPv4 CIDR"},
		{"private v6", `outbound example.org { to 10.0.0.1
			private fd00::/8 }`, "is not an IPv4 CIDR"},
		{"private empty", `outbound example.org { to 10.0.0.1
			private }`, "private needs"},
		// endpoints
		{"endpoint empty", `outbound example.org { to 10.0.0.1
			endpoint }`, "endpoint needs NAME"},
		{"endpoint no source", `outbound example.org { to 10.0.0.1
			endpoint eu europe-west1 }`, "needs at least one SOURCE"},
		{"endpoint bad source", `outbound example.org { to 10.0.0.1
			endpoint eu europe-west1 nope }`, "source \"nope\" is not an IPv4 address or CIDR"},
		{"endpoint v6 source", `outbound example.org { to 10.0.0.1
			endpoint eu europe-west1 fd00::1 }`, "is not an IPv4 address or CIDR"},
		{"endpoint bad region", `outbound example.org { to 10.0.0.1
			endpoint eu europe-wset1 10.0.0.9 }`, "europe-west1"},
		{"endpoint twice", "outbound example.org { to 10.0.0.1\nendpoint eu\nendpoint eu\n}", "named twice"},
		// O-3
		{"source_address with endpoint", "outbound example.org { to 10.0.0.1\nsource_address 10.0.0.9\nendpoint eu\n}", "never both"},
		{"source_address bad", "outbound example.org { to 10.0.0.1\nsource_address fd00::1\n}", "source_address \"fd00::1\" is not an IPv4 address"},
		{"source_address args", "outbound example.org { to 10.0.0.1\nsource_address\n}", "source_address needs exactly one"},
		// O-4
		{"11 in a region", "outbound example.org { to 10.0.0.1\n" + many(11, "europe-west1", "e") + "}", "more than 10 endpoints in region europe-west1"},
		{"101 in a zone", "outbound example.org { to 10.0.0.1\n" + refs(101) + "}", "101 endpoints named; at most 100 per zone"},
		// options
		{"timeout bad", "outbound example.org { to 10.0.0.1\ntimeout soon\n}", "timeout \"soon\" out of range"},
		{"timeout low", "outbound example.org { to 10.0.0.1\ntimeout 1ms\n}", "out of range 100ms..1m0s"},
		{"timeout args", "outbound example.org { to 10.0.0.1\ntimeout\n}", "timeout needs one duration"},
		{"force_tcp args", "outbound example.org { to 10.0.0.1\nforce_tcp yes\n}", "force_tcp takes no arguments"},
		{"max_concurrent bad", "outbound example.org { to 10.0.0.1\nmax_concurrent -1\n}", "max_concurrent \"-1\" out of range"},
		{"max_concurrent args", "outbound example.org { to 10.0.0.1\nmax_concurrent\n}", "max_concurrent needs one number"},
		{"probe args", "outbound example.org { to 10.0.0.1\nprobe example.org\n}", "probe needs NAME TYPE"},
		{"probe name", "outbound example.org { to 10.0.0.1\nprobe a..b SOA\n}", "probe \"a..b\" is not a domain name"},
		{"probe type", "outbound example.org { to 10.0.0.1\nprobe example.org SOAP\n}", "probe type \"SOAP\" is not a query type"},
		{"probe any", "outbound example.org { to 10.0.0.1\nprobe example.org ANY\n}", "probe type \"ANY\" is not a query type"},
		{"except outside", "outbound example.org { to 10.0.0.1\nexcept example.com\n}", "not under the forwarded zones"},
		{"except empty", "outbound example.org { to 10.0.0.1\nexcept\n}", "except needs"},
		{"unknown", "outbound example.org { to 10.0.0.1\nfrobnicate\n}", "unknown property \"frobnicate\""},
		{"region twice", "outbound example.org { to 10.0.0.1\nregion europe-west1\nregion us-east1\n}", "region given twice"},
		{"region unknown", "outbound example.org { to 10.0.0.1\nregion mars-north1\n}", "mars-north1"},
		{"subnet bad", "outbound example.org { to 10.0.0.1\nsubnet europe-west1 nope\n}", "is not a CIDR"},
		{"coordinates bad", "outbound example.org { to 10.0.0.1\ncoordinates x 91 0\n}", "latitude"},
		{"twice in block", "outbound example.org { to 10.0.0.1\n}\noutbound example.net { to 10.0.0.1\n}", "outbound given twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// caddy wants a closing brace on a line of its own.
			input := strings.ReplaceAll(tc.input, " }", "\n}")
			_, err := parse(caddy.NewTestController("dns", input))
			if err == nil {
				t.Fatalf("no error for %q", tc.input)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// O-4: the per-region limit holds across the server blocks of one instance; O-9: a name is
// declared once per instance.
func TestRegistryLimits(t *testing.T) {
	reg := newRegistry()
	for i := range maxPerRegion {
		if err := reg.declare(&Endpoint{Name: fmt.Sprint("e", i), Region: "europe-west1"}); err != nil {
			t.Fatal(err)
		}
	}
	err := reg.declare(&Endpoint{Name: "e10", Region: "europe-west1"})
	if err == nil || !strings.Contains(err.Error(), "region europe-west1 already has 10 endpoints") {
		t.Errorf("O-4 per region across blocks: %v", err)
	}
	if err := reg.declare(&Endpoint{Name: "u", Region: "us-east1"}); err != nil {
		t.Error(err)
	}
	err = reg.declare(&Endpoint{Name: "u", Region: "us-east1"})
	if err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Errorf("O-9 declared twice: %v", err)
	}
}

// Every ~~~ corefile snippet of README.md parses.
func TestReadmeExamples(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)~~~ corefile\n(.*?)~~~").FindAllStringSubmatch(string(b), -1)
	if len(blocks) == 0 {
		t.Fatal("no corefile snippets in README.md")
	}
	n := 0
	for _, blk := range blocks {
		for _, d := range directiveBlocks(blk[1], "outbound") {
			n++
			c := caddy.NewTestController("dns", d)
			c.ServerBlockKeys = []string{"corp.internal."}
			if _, err := parse(c); err != nil {
				t.Errorf("README snippet does not parse: %v\n%s", err, d)
			}
		}
	}
	if n == 0 {
		t.Fatal("no outbound block in README.md snippets")
	}
}

// directiveBlocks extracts every "name ... { ... }" (or one-line) directive from a Corefile.
func directiveBlocks(corefile, name string) []string {
	var out []string
	lines := strings.Split(corefile, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l != name && !strings.HasPrefix(l, name+" ") {
			continue
		}
		if !strings.HasSuffix(l, "{") {
			out = append(out, l)
			continue
		}
		depth := 0
		var b strings.Builder
		for ; i < len(lines); i++ {
			b.WriteString(lines[i] + "\n")
			depth += strings.Count(lines[i], "{") - strings.Count(lines[i], "}")
			if depth == 0 {
				break
			}
		}
		out = append(out, b.String())
	}
	return out
}
