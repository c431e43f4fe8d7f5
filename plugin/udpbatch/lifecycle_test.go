package udpbatch

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coresteer/coresteer/plugin/pkg/coretest"

	"github.com/miekg/dns"
)

// Stop and reload: nothing of udpbatch outlives its listener. A stopped server's socket is closed
// when miekg/dns closes it, whatever the shutdown callbacks do afterwards, so it leaves an
// SO_REUSEPORT group at once and its port is free.

// testfailshutdown is a plugin whose shutdown callback fails, set up before udpbatch (as pprof
// is: its callback returns the HTTP server's error when a profile request outlives its timeout).
// caddy's Restart stops the old servers, then runs the old callbacks and returns at the first
// error: the callbacks of the plugins after it never run.
const failShutdown = "testfailshutdown"

var registerFailShutdown = sync.OnceFunc(func() {
	registerDirective(failShutdown, pluginName, func(c *caddy.Controller) error {
		for c.Next() {
		}
		c.OnShutdown(func() error { return errors.New("shutdown failed") })
		return nil
	})
})

// testslowshutdown is a plugin whose shutdown callback waits for the test (healthcheck and
// pschealth stop their probes there; both set up before udpbatch).
const slowShutdown = "testslowshutdown"

var (
	slowEntered = make(chan struct{}, 16)
	slowMu      sync.Mutex
	slowProceed chan struct{}
)

var registerSlowShutdown = sync.OnceFunc(func() {
	registerDirective(slowShutdown, pluginName, func(c *caddy.Controller) error {
		for c.Next() {
		}
		c.OnShutdown(func() error {
			slowMu.Lock()
			p := slowProceed
			slowMu.Unlock()
			slowEntered <- struct{}{}
			<-p
			return nil
		})
		return nil
	})
})

// stopAllBut stops, with their callbacks, the caddy instances other than old: a failed reload
// leaves the new one running, which the test's server does not know.
func stopAllBut(old *caddy.Instance) {
	for _, i := range caddy.Instances() {
		if i != old {
			i.Stop()
			i.ShutdownCallbacks()
		}
	}
}

// exchangeOnce is exchange with a deadline, the error returned.
func (c *client) exchangeOnce(to netip.AddrPort, deadline time.Duration) error {
	c.send(to, query(c.tb, 2, "www.example.org.", dns.TypeA, false))
	c.conn.SetReadDeadline(time.Now().Add(deadline))
	_, _, err := c.conn.ReadFromUDPAddrPort(c.buf)
	return err
}

// A reload that moves the listener to another port, and whose old shutdown callbacks fail before
// udpbatch's: the old port is free once its server stopped, as without udpbatch.
func TestIntegrationFailedShutdownReleasesPort(t *testing.T) {
	registerFailShutdown()
	z := zone(t)
	p1, p2 := coretest.FreePort(t), coretest.FreePort(t)
	srv, err := coretest.New(zoneCorefile(p1, z, failShutdown))
	if err != nil {
		t.Fatal(err)
	}
	old := srv.Instance()
	t.Cleanup(func() {
		stopAllBut(old)
		srv.Stop()
	})
	c := newClient(t, "127.0.0.1")
	c.exchange(addrPort(t, srv.UDP), query(t, 1, "www.example.org.", dns.TypeA, false))
	err = srv.Reload(zoneCorefile(p2, z))
	t.Logf("reload: %v", err)
	// A short wait: the answer expected is none.
	if c.exchangeOnce(addrPort(t, "127.0.0.1:"+p1), 300*time.Millisecond) == nil {
		t.Fatal("the old server still answers")
	}
	l, err := net.ListenPacket("udp", "127.0.0.1:"+p1)
	if err != nil {
		t.Fatalf("old port %s still bound after its server stopped: %v", p1, err)
	}
	l.Close()
}

// The same failed callbacks on a reload from multisocket 2 to 1: one old socket is handed to the
// new server, the other one's server stops and its socket is closed, leaving the SO_REUSEPORT
// group. Were it kept open (a descriptor of udpbatch's), the kernel would keep hashing part of
// the clients to it, unread: each of 40 clients (each its own source port) is answered.
func TestIntegrationMultisocketShrinkAnswersAll(t *testing.T) {
	registerFailShutdown()
	two, one := shrinking(t, failShutdown)
	srv, err := coretest.New(two)
	if err != nil {
		t.Fatal(err)
	}
	old := srv.Instance()
	t.Cleanup(func() {
		stopAllBut(old)
		srv.Stop()
	})
	to := addrPort(t, srv.UDP)
	askMany(t, to)
	t.Logf("reload: %v", srv.Reload(one))
	if n := unanswered(t, to); n > 0 {
		t.Errorf("%d of 40 clients got no answer after the reload", n)
	}
}

// shrinking returns two Corefiles for one port: multisocket 2 with the directive extra, and
// multisocket 1 without it.
func shrinking(t *testing.T, extra string) (two, one string) {
	t.Helper()
	z, port := zone(t), coretest.FreePort(t)
	return zoneCorefile(port, z, "multisocket 2", extra), zoneCorefile(port, z, "multisocket 1")
}

// askMany has 16 clients (16 source ports) ask to, so both sockets of a multisocket group answer.
func askMany(t *testing.T, to netip.AddrPort) {
	t.Helper()
	for i := range 16 {
		c := newClient(t, "127.0.0.1")
		c.exchange(to, query(t, uint16(i), "www.example.org.", dns.TypeA, false))
		c.conn.Close()
	}
}

// unanswered returns how many of 40 clients, each its own source port, to answers none within
// 2 s (a socket that swallows queries makes half of them wait that long).
func unanswered(t *testing.T, to netip.AddrPort) int {
	t.Helper()
	n := 0
	for range 40 {
		c := newClient(t, "127.0.0.1")
		if c.exchangeOnce(to, 2*time.Second) != nil {
			n++
		}
		c.conn.Close()
	}
	return n
}

// Even when every callback succeeds, they run after every old server stopped and take their
// time: in that window the socket that was not handed over must be gone from the SO_REUSEPORT
// group already, as without udpbatch. Every client is answered while the old instance runs its
// shutdown callbacks.
func TestIntegrationReloadWindowAnswersAll(t *testing.T) {
	registerSlowShutdown()
	slowMu.Lock()
	slowProceed = make(chan struct{})
	proceed := slowProceed
	slowMu.Unlock()
	release := sync.OnceFunc(func() { close(proceed) })
	t.Cleanup(release)
	two, one := shrinking(t, slowShutdown)
	srv, err := coretest.New(two)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	to := addrPort(t, srv.UDP)
	askMany(t, to)
	reloaded := make(chan error, 1)
	go func() { reloaded <- srv.Reload(one) }()
	<-slowEntered // the old servers are stopped; the shutdown callbacks are running
	n := unanswered(t, to)
	release()
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		t.Errorf("%d of 40 clients got no answer while the old instance ran its shutdown callbacks", n)
	}
}

// udpSockets returns how many UDP sockets the process has open. Only UDP: udpbatch has nothing
// to do with the others (a TCP listener was once seen left open by a multisocket reload).
func udpSockets(t *testing.T) int {
	t.Helper()
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/self/net/udp", "/proc/self/net/udp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) > 9 && f[0] != "sl" {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && inodes[target] {
			n++
		}
	}
	return n
}

// udpbatch holds no descriptor of a UDP socket: 20 reloads with answers on every socket leave as
// many open as before, with one socket and with multisocket 2, and a stop closes them all.
func TestIntegrationReloadLeavesNoDescriptor(t *testing.T) {
	for _, extra := range []string{"", "multisocket 2"} {
		t.Run(extra, func(t *testing.T) {
			corefile := zoneCorefile(coretest.FreePort(t), zone(t), extra)
			base := udpSockets(t)
			srv, err := coretest.New(corefile)
			if err != nil {
				t.Fatal(err)
			}
			to := addrPort(t, srv.UDP)
			askMany(t, to)
			running := udpSockets(t)
			const reloads = 20
			for range reloads {
				if err := srv.Reload(corefile); err != nil {
					t.Fatal(err)
				}
				askMany(t, to)
			}
			after := udpSockets(t)
			srv.Stop()
			end := udpSockets(t)
			t.Logf("UDP sockets: before %d, running %d, after %d reloads %d, stopped %d", base, running, reloads, after, end)
			if after != running {
				t.Errorf("%d UDP sockets after %d reloads, %d before: %d left open", after, reloads, running, after-running)
			}
			if end > base {
				t.Errorf("%d UDP sockets after stop, %d before start", end, base)
			}
		})
	}
}
