package udpbatch

import (
	"errors"
	"strings"
	"testing"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		input string
		max   int
	}{
		{"udpbatch", defaultMax},
		{"udpbatch 1", 1},
		{"udpbatch 256", 256},
		{"udpbatch 1024", 1024},
	} {
		u, err := parse(caddy.NewTestController("dns", tc.input))
		if err != nil {
			t.Errorf("%q: %v", tc.input, err)
			continue
		}
		if u.Max != tc.max {
			t.Errorf("%q: max %d, want %d", tc.input, u.Max, tc.max)
		}
	}
}

// Every bad input is refused with an error naming the property, the value and what is allowed.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		input string
		keys  []string
		want  string
	}{
		{"udpbatch 0", nil, `max "0": want a whole number of answers per system call from 1 to 1024`},
		{"udpbatch 1025", nil, `max "1025": want a whole number of answers per system call from 1 to 1024`},
		{"udpbatch -3", nil, `max "-3"`},
		{"udpbatch many", nil, `max "many"`},
		{"udpbatch 8 16", nil, "Wrong argument count"},
		{"udpbatch {\n max 8\n}", nil, `unknown property "max": udpbatch takes no block`},
		{"udpbatch\nudpbatch", nil, "can only be used once per Server Block"},
		{"udpbatch", []string{"tls://example.org:853"}, `only plain DNS server blocks are supported; "tls://example.org:853" uses transport "tls"`},
		{"udpbatch", []string{"example.org:53", "https://example.org:443"}, `"https://example.org:443" uses transport "https"`},
	} {
		c := caddy.NewTestController("dns", tc.input)
		if tc.keys != nil {
			c.ServerBlockKeys = tc.keys
		}
		_, err := parse(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.input, err, tc.want)
		}
	}
}

// setup installs the decorator on the server block, and only once.
func TestSetup(t *testing.T) {
	c := caddy.NewTestController("dns", "udpbatch 32")
	if err := setup(c); err != nil {
		t.Fatal(err)
	}
	if dnsserver.GetConfig(c).UDPDecorateWriterFunc == nil {
		t.Fatal("no UDP writer decorator installed")
	}
}

// shed decorates the same writer: with both in one block, one would silently undo the other.
// shed sets up first (chain order), so udpbatch sees it and refuses.
func TestSetupRefusesShed(t *testing.T) {
	_, err := coretest.New(`example.org:0 {
	bind 127.0.0.1
	shed
	udpbatch
	whoami
}`)
	if err == nil || !strings.Contains(err.Error(), "already decorates UDP writes") {
		t.Fatalf("error %v, want one refusing shed with udpbatch", err)
	}
}

// FuzzParse: the directive either fails with an error that says where (Testfile:LINE) or once
// per server block, or gives a batch size of 1..1024 (one sendmmsg's most).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"udpbatch", "udpbatch 64", "udpbatch 0", "udpbatch {\n}", "udpbatch 1 2", "udpbatch 1024", "udpbatch 1025", "udpbatch\nudpbatch", "udpbatch -1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		u, err := parse(caddy.NewTestController("dns", in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "Testfile:") && !errors.Is(err, plugin.ErrOnce) {
				t.Fatalf("%q: the error %q does not say where", in, err)
			}
			return
		}
		if u.Max < 1 || u.Max > maxMax {
			t.Fatalf("%q parsed with a batch of %d, want 1..%d", in, u.Max, maxMax)
		}
	})
}

// FuzzServeDNS: udpbatch answers no query; any query a server accepts is passed on, and the
// reply of the next plugin reaches the client.
func FuzzServeDNS(f *testing.F) {
	u := New()
	u.Next = coretest.Echo
	coretest.FuzzPassThrough(f, u)
}
