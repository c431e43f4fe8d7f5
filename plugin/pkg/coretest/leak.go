package coretest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// ServerLoops are goleak options that ignore the serve loops of CoreDNS servers. A reload stops
// the old instance's servers; a miekg/dns server stopped before its serve loop has started
// ("server not started") keeps serving its handed-over socket. That race is in CoreDNS and
// miekg/dns, not in our plugins, and back-to-back reloads in tests hit it: leak tests of our
// plugins add these options so they check our goroutines and not that race.
func ServerLoops() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/core/dnsserver.(*Server).Serve"),
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/core/dnsserver.(*Server).ServePacket"),
		goleak.IgnoreAnyFunction("github.com/coredns/caddy.startServers.func2"),
		goleak.IgnoreAnyFunction("github.com/coredns/caddy.startServers.func3"),
	}
}

// leakWait is how long NoLeak waits for goroutines to end: servers, probers and loops stop
// asynchronously (a miekg/dns UDP reader leaves at its 2 s read deadline), and a loaded CI machine
// runs them late. It stays below the timers on which goroutines the tests watch end by themselves
// (outbound's idle worker, 10 s; miekg/dns's idle TCP connection, 8 s), so one that a stop failed
// to end is still found.
const leakWait = 5 * time.Second

// NoLeak fails tb if goroutines that opts do not ignore are still running after leakWait. It polls
// goleak.Find instead of trusting goleak.VerifyNone's own retries, which give up after about
// half a second.
func NoLeak(tb testing.TB, opts ...goleak.Option) {
	tb.Helper()
	if err := findLeak(opts...); err != nil {
		tb.Error(err)
	}
}

// VerifyTestMain is goleak.VerifyTestMain with NoLeak's wait: it runs the package's tests and,
// when they pass, fails the package if goroutines that opts do not ignore outlive them. opts are
// goleak.Find's (goleak.Cleanup is not one of them).
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := findLeak(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlive the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeak polls goleak.Find until it finds nothing or leakWait has passed, and returns what it
// found last.
func findLeak(opts ...goleak.Option) error {
	deadline := time.Now().Add(leakWait)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
