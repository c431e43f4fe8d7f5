package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The queries of a bucket go to the first sample at or after the bucket's start; samples in the
// load's first half second are left out (too short for a rate), their queries counted in the next.
func TestJoinBucketsToSamples(t *testing.T) {
	buckets := []Bucket{{Sent: 10, OK: 10}, {Sent: 10, OK: 9, Timeout: 1}, {Sent: 10, OK: 7, Failed: 3, Refused: 2, Servfail: 1}, {Sent: 10, OK: 10}}
	samples := []Sample{{T: 100.2}, {T: 101.5}, {T: 102.5}, {T: 103.5}}
	rows := join(buckets, samples, 100, 1)
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3 (the sample at 0.2 s left out): %+v", len(rows), rows)
	}
	want := []struct{ sent, ok, failed, refused, servfail, timeout int }{
		{20, 19, 0, 0, 0, 1}, // buckets at 0 s and 1 s
		{10, 7, 3, 2, 1, 0},  // bucket at 2 s
		{10, 10, 0, 0, 0, 0}, // bucket at 3 s
	}
	for i, w := range want {
		r := rows[i]
		if r.Sent != w.sent || r.OK != w.ok || r.Failed != w.failed || r.Refused != w.refused || r.Servfail != w.servfail || r.Timeout != w.timeout {
			t.Errorf("row %d: got %+v, want %+v", i, r, w)
		}
	}
	if rows[0].Secs != 1.5 || rows[1].Secs != 1 {
		t.Errorf("intervals: got %v and %v s, want 1.5 and 1", rows[0].Secs, rows[1].Secs)
	}
}

// A failure is "expected" only next to an event of a kind given with -expected, within -grace.
func TestReportFailureVerdicts(t *testing.T) {
	buckets := make([]Bucket, 30)
	for i := range buckets {
		buckets[i] = Bucket{Sent: 10, OK: 10}
	}
	buckets[5] = Bucket{Sent: 10, OK: 8, Timeout: 2}              // 2 s after resolver-down
	buckets[20] = Bucket{Sent: 10, OK: 9, Failed: 1, Servfail: 1} // 10 s after it, past the grace
	var samples []Sample
	for s := 1; s <= 30; s++ {
		samples = append(samples, Sample{T: 1000 + float64(s), RSSKB: 2048, Goroutines: 10, FDs: 5, Thrds: 4})
	}
	events := []Event{{T: 1003.5, Kind: "resolver-down", Detail: "resolver 1"}}
	o := options{start: 1000, bucket: time.Second, grace: 3 * time.Second, expected: "resolver-down"}
	var b bytes.Buffer
	writeReport(&b, o, buckets, join(buckets, samples, 1000, 1), events, map[string]string{"resolver-down": "may fail"})
	out := b.String()
	for _, s := range []string{
		"3 failed queries: 2 after an event that the rules say may fail queries, 1 that the rules say should not fail.",
		"| resolver-down | 1 | may fail |",
		"expected after resolver-down",
		"no churn event within 3s | not expected by the rules",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
}
