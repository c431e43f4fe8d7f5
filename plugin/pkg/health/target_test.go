package health

import (
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"10.0.0.1", "10.0.0.1:0", ""},
		{"10.0.0.1:8080", "10.0.0.1:8080", ""},
		{"::ffff:10.0.0.1", "10.0.0.1:0", ""},
		{"[2001:db8::1]:443", "[2001:db8::1]:443", ""},
		{"2001:db8::1", "[2001:db8::1]:0", ""},
		{"10.0.0.300", "", "not an IP address or IP:PORT"},
		{"10.0.0.2:http", "", "not an IP address or IP:PORT"},
		{"10.0.0.1:0", "", "port 0 is not allowed"},
		{"0.0.0.0", "", "unspecified address is not allowed"},
		{"224.0.0.1:80", "", "multicast address is not allowed"},
		{"fe80::1%eth0", "", "IPv6 zones are not allowed"},
	} {
		got, err := ParseTarget(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got.String() != tc.want):
			t.Errorf("%q: %v %v, want %s", tc.in, got, err, tc.want)
		}
	}
}
