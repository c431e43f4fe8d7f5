package routingpolicy

import (
	"fmt"
	"testing"

	"github.com/coresteer/coresteer/plugin/pkg/health"
)

func foBlock(opts string) string {
	return `routingpolicy example.org {` + geoLoc + `
		failover www A 60 "10.0.0.1,10.0.0.2" "us-east1=10.9.1.1;europe-west2=10.9.2.1" ` + opts + `
	}`
}

func TestFailoverPrimary(t *testing.T) {
	// R-FO-1: the primary answers, without its unhealthy addresses.
	rp, b := newTest(t, foBlock("healthcheck web"))
	if got := one(t, rp, "10.1.1.1"); got != "10.0.0.1,10.0.0.2" {
		t.Fatalf("got %s", got)
	}
	set(b, "web", "10.0.0.1", health.Unhealthy)
	if got := one(t, rp, "10.1.1.1"); got != "10.0.0.2" {
		t.Fatalf("got %s, want 10.0.0.2", got)
	}
}

func TestFailoverBackupGeo(t *testing.T) {
	// R-FO-2: primary all unhealthy: the backup answers by the geo rules.
	rp, b := newTest(t, foBlock("healthcheck web"))
	set(b, "web", "10.0.0.1", health.Unhealthy)
	set(b, "web", "10.0.0.2", health.Unhealthy)
	if got := one(t, rp, "10.1.1.1"); got != "10.9.1.1" {
		t.Fatalf("us-east1 client: got %s, want 10.9.1.1", got)
	}
	if got := one(t, rp, "10.2.1.1"); got != "10.9.2.1" {
		t.Fatalf("europe client: got %s, want 10.9.2.1", got)
	}
	set(b, "web", "10.9.1.1", health.Unhealthy)
	if got := one(t, rp, "10.1.1.1"); got != "10.9.2.1" {
		t.Fatalf("backup geo failover: got %s, want 10.9.2.1", got)
	}
}

func TestFailoverTrickle(t *testing.T) {
	// R-FO-3: the trickle share goes to the backup while the primary is healthy.
	rp, _ := newTest(t, foBlock("trickle 0.1 healthcheck web"))
	got := count(t, rp, "www.example.org.", "10.1.1.1", draws)
	within(t, "trickle 0.1", got["10.9.1.1"], draws, 0.1)
	within(t, "primary 0.9", got["10.0.0.1,10.0.0.2"], draws, 0.9)

	// 1 = manual failover.
	rp, _ = newTest(t, foBlock("trickle 1"))
	if got := count(t, rp, "www.example.org.", "10.1.1.1", 1000); got["10.9.1.1"] != 1000 {
		t.Fatalf("trickle 1: %v", got)
	}
	// 0 = never.
	rp, _ = newTest(t, foBlock("trickle 0"))
	if got := count(t, rp, "www.example.org.", "10.1.1.1", 1000); got["10.0.0.1,10.0.0.2"] != 1000 {
		t.Fatalf("trickle 0: %v", got)
	}
}

func TestFailoverFailOpen(t *testing.T) {
	// R-FO-4: primary and backup unhealthy: fail open (the primary, whole).
	rp, b := newTest(t, foBlock("healthcheck web"))
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.9.1.1", "10.9.2.1"} {
		set(b, "web", a, health.Unhealthy)
	}
	if got := one(t, rp, "10.1.1.1"); got != "10.0.0.1,10.0.0.2" {
		t.Fatalf("got %s, want the whole primary", got)
	}
}

func TestFailoverFencedBackup(t *testing.T) {
	// R-FO-2 with a fenced geo backup: the backup stays in the client's location; R-FO-4 when
	// that location is unhealthy too: the primary, whole.
	rp, b := newTest(t, foBlock("fence healthcheck web"))
	set(b, "web", "10.0.0.1", health.Unhealthy)
	set(b, "web", "10.0.0.2", health.Unhealthy)
	if got := one(t, rp, "10.2.1.1"); got != "10.9.2.1" {
		t.Fatalf("europe client: got %s, want 10.9.2.1", got)
	}
	set(b, "web", "10.9.2.1", health.Unhealthy)
	if got := one(t, rp, "10.2.1.1"); got != "10.0.0.1,10.0.0.2" {
		t.Fatalf("fenced backup location down: got %s, want the whole primary", got)
	}
}

func TestFailoverFailOpenTrickle(t *testing.T) {
	// R-FO-4 with trickle: both unhealthy means answering as if everything were healthy, trickle
	// included: trickle 1 is the backup (its nearest location, whole), trickle 0.5 splits.
	down := func(b *health.Board) {
		for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.9.1.1", "10.9.2.1"} {
			set(b, "web", a, health.Unhealthy)
		}
	}
	rp, b := newTest(t, foBlock("trickle 1 healthcheck web"))
	down(b)
	if got := count(t, rp, "www.example.org.", "10.2.1.1", 1000); got["10.9.2.1"] != 1000 {
		t.Fatalf("trickle 1, all unhealthy, europe client: %v, want the europe backup", got)
	}
	rp, b = newTest(t, foBlock("trickle 0.5 healthcheck web"))
	down(b)
	got := count(t, rp, "www.example.org.", "10.1.1.1", draws)
	within(t, "fail open trickle 0.5 to the backup", got["10.9.1.1"], draws, 0.5)
	within(t, "fail open trickle 0.5 to the primary", got["10.0.0.1,10.0.0.2"], draws, 0.5)
}

// TestFailoverFailOpenTrickleFencedBackup: R-FO-4, R-WRR-7 with trickle 1 and a fenced geo
// backup: with every address unhealthy, each client gets exactly the answer it gets with every
// address healthy: the backup's nearest location, whole (fencing changes nothing while that
// location is healthy, so "as if everything were healthy" is the nearest location, not the
// primary and not a farther one).
func TestFailoverFailOpenTrickleFencedBackup(t *testing.T) {
	block := `routingpolicy example.org {` + geoLoc + `
		failover www A 60 "10.0.0.1,10.0.0.2" "us-east1=10.9.1.1,10.9.1.2;europe-west2=10.9.2.1" trickle 1 fence healthcheck web
	}`
	healthy, _ := newTest(t, block)
	down, b := newTest(t, block)
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.9.1.1", "10.9.1.2", "10.9.2.1"} {
		set(b, "web", a, health.Unhealthy)
	}
	// us-east1 (the server's region), europe-west1 (nearest backup: europe-west2), asia-east1
	// (no backup location of its own).
	for _, client := range []string{"10.1.1.1", "10.2.1.1", "10.3.1.1"} {
		want := count(t, healthy, "www.example.org.", client, 100)
		got := count(t, down, "www.example.org.", client, 100)
		if len(want) != 1 || len(got) != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("client %s: all unhealthy %v, all healthy %v", client, got, want)
		}
	}
	if got := one(t, down, "10.1.1.1"); got != "10.9.1.1,10.9.1.2" {
		t.Errorf("us-east1 client, all unhealthy: %s, want the us-east1 backup whole", got)
	}
}
