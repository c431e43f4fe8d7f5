package main

import (
	"testing"
	"time"
)

func TestSummarizeSteady(t *testing.T) {
	ok := Bucket{Sent: 100, OK: 100}
	bad := Bucket{Sent: 100, OK: 50, Timeout: 50}
	slight := Bucket{Sent: 100, OK: 99, Failed: 1} // 1 % fails: still steady at -steady 0.01
	bucket := 100 * time.Millisecond
	for _, tc := range []struct {
		name    string
		buckets []Bucket
		at      time.Duration
		want    time.Duration
		after   int
	}{
		{"never failed", []Bucket{ok, ok, ok, ok}, 200 * time.Millisecond, 0, 0},
		{"recovers", []Bucket{ok, ok, bad, bad, slight, ok}, 200 * time.Millisecond, 200 * time.Millisecond, 101},
		{"never recovers", []Bucket{ok, ok, bad, ok, bad}, 200 * time.Millisecond, -1, 100},
		{"failures before -at do not count", []Bucket{bad, ok, ok}, 100 * time.Millisecond, 0, 0},
	} {
		s := summarize(tc.buckets, nil, bucket, tc.at, 0.01)
		if s.Steady != tc.want || s.FailedAfter != tc.after {
			t.Errorf("%s: steady %v failed_after %d, want %v %d", tc.name, s.Steady, s.FailedAfter, tc.want, tc.after)
		}
	}
}

func TestSummarizePercentiles(t *testing.T) {
	var lat []time.Duration
	for i := 1000; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	s := summarize([]Bucket{{Sent: 1000, OK: 1000}}, lat, time.Second, 0, 0.01)
	if s.P50 != 501*time.Millisecond || s.P99 != 991*time.Millisecond || s.P999 != 1000*time.Millisecond {
		t.Errorf("p50 %v p99 %v p99.9 %v", s.P50, s.P99, s.P999)
	}
}

func TestValidateLoopbackOnly(t *testing.T) {
	base := options{server: "127.0.0.1:53", qps: 10, duration: time.Second, timeout: time.Second, bucket: time.Millisecond * 100, sockets: 1, steady: 0.01}
	if err := base.validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, mod := range []func(*options){
		func(o *options) { o.server = "192.0.2.1:53" },
		func(o *options) { o.server = "127.0.0.1" },
		func(o *options) { o.source = "10.0.0.1" },
		func(o *options) { o.qps = 0 },
		func(o *options) { o.duration = 25 * time.Hour },
		func(o *options) { o.at = 2 * time.Second },
	} {
		o := base
		mod(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%+v: want an error", o)
		}
	}
}
