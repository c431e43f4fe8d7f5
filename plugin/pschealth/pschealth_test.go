package pschealth

import (
	"context"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coresteer/coresteer/plugin/pkg/health"

	"github.com/miekg/dns"
)

// pschealth answers nothing: every query goes to the next plugin unchanged.
func TestServeDNSPassesThrough(t *testing.T) {
	p := New(config(t, ""), health.NewBoard(time.Now))
	p.Next = test.NextHandler(dns.RcodeNameError, nil)
	m := new(dns.Msg)
	m.SetQuestion("example.org.", dns.TypeA)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	code, err := p.ServeDNS(context.Background(), rec, m)
	if err != nil || code != dns.RcodeNameError {
		t.Errorf("ServeDNS = %d, %v; want the next plugin's NXDOMAIN", code, err)
	}
	if p.Name() != "pschealth" {
		t.Errorf("Name = %q", p.Name())
	}
}
