// Package etcdtest runs real etcd servers, Debian's etcd-server binary (etcd 3.4), on free
// loopback ports with temporary data directories, and fleet replicas in processes of their own,
// for the tests and measurements of the fleet mode of healthcheck (docs/DESIGN.md section 8). A
// server can be stopped and started again on the same ports and data, as an etcd outage would,
// or paused, as a hung host would; a cluster has several members. A test that needs etcd fails
// when the binary is missing: it never skips.
package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mwtls "github.com/coredns/coredns/plugin/pkg/tls"
	"github.com/coresteer/coresteer/plugin/pkg/freeport"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Binary is where Debian's etcd-server package installs etcd.
const Binary = "/usr/bin/etcd"

// Server is one etcd process and what it needs to start again.
type Server struct {
	// Endpoint is the client URL, http://127.0.0.1:PORT.
	Endpoint string

	bin, dir, name, peer string
	args                 []string
	tls                  *tls.Config // the client's, when the server requires client certificates

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// TLS are the files of a server that serves HTTPS and requires client certificates: Cert and
// Key are its certificate (which must name 127.0.0.1) and key, CA the CA of the client
// certificates, and ClientCert and ClientKey what the helper itself connects with.
type TLS struct {
	Cert, Key, CA, ClientCert, ClientKey string
}

// Launch starts an etcd server with its data in dir and waits until it answers; extra are more
// etcd flags (--quota-backend-bytes 2000000). The caller stops it with Stop.
func Launch(dir string, extra ...string) (*Server, error) { return LaunchTLS(dir, nil, extra...) }

// LaunchTLS is Launch with TLS on the client URL when t is not nil.
func LaunchTLS(dir string, t *TLS, extra ...string) (*Server, error) {
	s, err := newServer(dir, "etcdtest", t)
	if err != nil {
		return nil, err
	}
	s.args = append(s.args, "--initial-cluster", s.name+"="+s.peer)
	s.args = append(s.args, extra...)
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// newServer prepares a member named name with its data in dir, on free ports; its arguments
// lack --initial-cluster.
func newServer(dir, name string, t *TLS) (*Server, error) {
	// etcd wants its data directory private.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	bin := Binary
	if _, err := os.Stat(bin); err != nil {
		p, lerr := exec.LookPath("etcd")
		if lerr != nil {
			return nil, fmt.Errorf("no etcd binary at %s or in PATH (apt-get install etcd-server): %w", Binary, err)
		}
		bin = p
	}
	cport, err := freeport.On("127.0.0.1")
	if err != nil {
		return nil, err
	}
	pport, err := freeport.On("127.0.0.1")
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if t != nil {
		scheme = "https"
	}
	s := &Server{
		Endpoint: scheme + "://127.0.0.1:" + cport,
		bin:      bin,
		dir:      dir,
		name:     name,
		peer:     "http://127.0.0.1:" + pport,
	}
	s.args = []string{
		"--name", s.name,
		"--data-dir", dir,
		"--listen-client-urls", s.Endpoint,
		"--advertise-client-urls", s.Endpoint,
		"--listen-peer-urls", s.peer,
		"--initial-advertise-peer-urls", s.peer,
		"--logger", "zap",
		"--log-level", "error",
		"--log-outputs", "stderr",
	}
	if t != nil {
		s.args = append(s.args, "--cert-file", t.Cert, "--key-file", t.Key, "--trusted-ca-file", t.CA, "--client-cert-auth")
		if s.tls, err = mwtls.NewTLSConfigFromArgs(t.ClientCert, t.ClientKey, t.CA); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// New launches a server for tb, in a temporary directory, with extra etcd flags, and stops it
// when tb ends. It fails tb when etcd cannot start, the binary missing included.
func New(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	return NewTLS(tb, nil, extra...)
}

// NewTLS is New with TLS when t is not nil.
func NewTLS(tb testing.TB, t *TLS, extra ...string) *Server {
	tb.Helper()
	s, err := LaunchTLS(tb.TempDir(), t, extra...)
	if err != nil {
		tb.Fatalf("etcd: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// NewCluster launches a cluster of n members for tb and stops it when tb ends; it returns when
// every member answers.
func NewCluster(tb testing.TB, n int) []*Server {
	tb.Helper()
	ms := make([]*Server, 0, n)
	initial := make([]string, 0, n)
	for i := range n {
		s, err := newServer(tb.TempDir(), fmt.Sprintf("m%d", i), nil)
		if err != nil {
			tb.Fatalf("etcd: %v", err)
		}
		ms = append(ms, s)
		initial = append(initial, s.name+"="+s.peer)
	}
	for _, s := range ms {
		s.args = append(s.args, "--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new")
		tb.Cleanup(s.Stop)
		if err := s.spawn(); err != nil {
			tb.Fatalf("etcd: %v", err)
		}
	}
	// A member answers only once the cluster has a leader: start them all, then wait.
	for _, s := range ms {
		s.mu.Lock()
		done := s.done
		s.mu.Unlock()
		if err := waitReady(s.Endpoint, s.tls, done); err != nil {
			tb.Fatalf("etcd member %s: %v", s.name, err)
		}
	}
	return ms
}

// Start starts the server again after Stop, on the same ports and data, and waits until it
// answers.
func (s *Server) Start() error {
	var err error
	for range 50 { // the ports may still be held for a moment after a stop
		if err = s.spawn(); err != nil {
			return err
		}
		s.mu.Lock()
		done := s.done
		s.mu.Unlock()
		if err = waitReady(s.Endpoint, s.tls, done); err == nil {
			return nil
		}
		s.kill()
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("etcd did not start: %w", err)
}

// spawn starts the process without waiting for it to answer.
func (s *Server) spawn() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("etcd already running")
	}
	cmd := exec.Command(s.bin, s.args...) //nolint:gosec // the test's own binary and arguments
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	return nil
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s) and waits for it to exit. The data
// stays for Start.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server handles the SIGTERM
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd, s.done = nil, nil
}

func (s *Server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
		s.cmd, s.done = nil, nil
	}
}

// Pause stops the server's process (SIGSTOP) as a hung host would: its connections stay open
// and nothing answers on them, until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Client returns a client of the server, closed when tb ends.
func (s *Server) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	return Client(tb, s.tls, s.Endpoint)
}

// Client returns a client of endpoints (one etcd cluster), closed when tb ends.
func Client(tb testing.TB, tc *tls.Config, endpoints ...string) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// waitReady polls the server until a read succeeds, for at most 30 s, or until it exits.
func waitReady(endpoint string, tc *tls.Config, exited chan struct{}) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = c.Get(ctx, "/etcdtest/ready")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("etcd exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
