package coretest

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

const corefile = `example.org:0 {
	bind 127.0.0.1
	template IN A example.org {
		answer "{{ .Name }} 60 IN A 192.0.2.1"
	}
}
`

func TestStartQueryReloadStop(t *testing.T) {
	defer NoLeak(t, goleak.IgnoreCurrent())

	s, err := New(corefile)
	if err != nil {
		t.Fatal(err)
	}
	if s.UDP == "" || s.TCP == "" || !strings.HasPrefix(s.UDP, "127.0.0.1:") {
		t.Fatalf("listeners %q %q, want 127.0.0.1 addresses", s.UDP, s.TCP)
	}
	r, err := s.Query("www.example.org", dns.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
		t.Fatalf("answer %v", r.Answer)
	}

	udp := s.UDP
	if err := s.Reload(strings.Replace(corefile, "192.0.2.1", "192.0.2.2", 1)); err != nil {
		t.Fatal(err)
	}
	if u, _ := s.Ports(0); u != udp {
		t.Fatalf("reload moved the listener from %s to %s", udp, u)
	}
	r, err = s.QueryFrom("127.0.0.9", "www.example.org", dns.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.2" {
		t.Fatalf("answer after reload %v", r.Answer)
	}

	// A broken Corefile is refused and the old one keeps serving.
	if err := s.Reload("example.org:0 {\n nosuchplugin\n}\n"); err == nil {
		t.Fatal("a broken Corefile was accepted")
	}
	if r, err := s.Query("www.example.org", dns.TypeA); err != nil || len(r.Answer) != 1 {
		t.Fatalf("after a refused reload: %v %v", r, err)
	}
	s.Stop()
	s.Stop() // twice is harmless
}

func TestNewRefusesBadCorefile(t *testing.T) {
	if _, err := New("example.org:0 {\n nosuchplugin\n}\n"); err == nil {
		t.Fatal("a broken Corefile was accepted")
	}
}
