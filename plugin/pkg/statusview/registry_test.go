package statusview

import (
	"net/netip"
	"testing"
)

type fakeProvider struct {
	name    string
	answers bool
}

func (f *fakeProvider) Fill(v *View) {
	v.RecordSets = append(v.RecordSets, RecordSet{Name: f.name})
}

func (f *fakeProvider) Explain(q Question) *Explanation {
	if !f.answers {
		return nil
	}
	return &Explanation{Plugin: f.name, Zone: q.Name}
}

// S-1: the view is the newest running instance's; when it leaves (a failed reload abandons it),
// the one before shows again; explain asks only the live explainers that answer the name.
func TestLiveIsNewestInstance(t *testing.T) {
	r := &Registry{}
	old := &entry{gen: 1, p: &fakeProvider{name: "old", answers: true}}
	r.add(old)
	n1 := &entry{gen: 2, p: &fakeProvider{name: "new-a"}}
	n2 := &entry{gen: 2, p: &fakeProvider{name: "new-b", answers: true}}
	r.add(n1)
	r.add(n2)
	names := func() []string {
		var v View
		r.Collect(&v)
		out := make([]string, 0, len(v.RecordSets))
		for _, rs := range v.RecordSets {
			out = append(out, rs.Name)
		}
		return out
	}
	if got := names(); len(got) != 2 || got[0] != "new-a" || got[1] != "new-b" {
		t.Fatalf("during the overlap: %v, want the new instance's", got)
	}
	xs := r.Explain(Question{Name: "example.org.", Client: netip.MustParseAddr("192.0.2.1")})
	if len(xs) != 1 || xs[0].Plugin != "new-b" {
		t.Fatalf("explain: %+v", xs)
	}
	r.remove(n1)
	r.remove(n2)
	if got := names(); len(got) != 1 || got[0] != "old" {
		t.Fatalf("after the new instance left: %v, want the old one's", got)
	}
	r.remove(old)
	if got := names(); len(got) != 0 {
		t.Fatalf("after every instance left: %v", got)
	}
}

// Finish attaches each probe to its board target.
func TestFinishMergesProbes(t *testing.T) {
	v := View{Targets: []Target{{Key: "web/10.0.0.1"}, {Key: "web/10.0.0.2"}}}
	v.AddProbe("web/10.0.0.2", Probe{Target: "10.0.0.2:80"})
	v.Finish()
	if v.Targets[0].Probe != nil || v.Targets[1].Probe == nil || v.Targets[1].Probe.Target != "10.0.0.2:80" {
		t.Fatalf("targets: %+v", v.Targets)
	}
}
