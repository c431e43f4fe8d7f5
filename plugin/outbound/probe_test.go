package outbound

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// O-6 (issue 13, problem 5): probes ask a fixed question, by default the zone apex SOA, whatever
// clients asked first: a first client question that the resolver refuses does not make every
// probe fail.
func TestProbeQuestionFixed(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	r.refuseNames("refused.")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\n}")
	m := new(dns.Msg)
	m.SetQuestion("refused.example.", dns.TypeA)
	if a := serve(t, o, m); a.Rcode != dns.RcodeRefused {
		t.Fatalf("client query: %s", dns.RcodeToString[a.Rcode])
	}
	o.explore(nil)
	if n := r.asked("example."); n != 1 {
		t.Errorf("O-6: the resolver got %d probes for the zone apex, want 1", n)
	}
	if n := r.asked("refused.example."); n != 1 {
		t.Errorf("O-6: the client's question was asked %d times: probes repeat it", n)
	}
	if _, _, _, consec, due := o.rk.pairs[0].stats(time.Now()); consec != 0 || due {
		t.Errorf("O-6: the probe failed (%d failures, due %v)", consec, due)
	}
}

// O-6: `probe NAME TYPE` sets the probe question.
func TestProbeProperty(t *testing.T) {
	r := startResolver(t, "127.0.0.50")
	o := newHandler(t, "outbound example. {\nto "+r.addr+"\nprivate 127.0.0.0/8\nprobe Health.Example.Net txt\n}")
	var seen dns.Question
	r.mu.Lock()
	r.onQuery = func(q *dns.Msg) { seen = q.Question[0] }
	r.mu.Unlock()
	o.explore(nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	if seen.Name != "health.example.net." || seen.Qtype != dns.TypeTXT {
		t.Errorf("O-6: probe asked %v, want health.example.net. TXT", seen)
	}
}

// O-6 (issue 13, problem 5): every pair that needs a probe gets one in the round, however many
// they are: ten failed paths are ten probes, not the first eight in declaration order.
func TestEveryDuePairProbed(t *testing.T) {
	rs := make([]*resolver, 0, 10)
	targets := ""
	for i := range 10 {
		r := startResolver(t, fmt.Sprintf("127.0.0.%d", 71+i))
		rs = append(rs, r)
		targets += " " + r.addr
	}
	o := newHandler(t, "outbound example. {\nto"+targets+"\nprivate 127.0.0.0/8\n}")
	for _, p := range o.rk.pairs {
		p.record(o.now(), failure, 0)
	}
	o.explore(nil)
	for i, r := range rs {
		if n := r.asked("example."); n != 1 {
			t.Errorf("O-6: target %d got %d probes, want 1", i+1, n)
		}
	}
}
