// Package etcdtest runs a real etcd server, Debian's etcd-server binary (etcd 3.4), on free
// loopback ports with a temporary data directory, for the tests and measurements of the fleet
// mode of healthcheck (docs/DESIGN.md section 8). The server can be stopped and started again on
// the same ports and data, as an etcd outage would. A test that needs etcd fails when the binary
// is missing: it never skips.
package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	mwtls "github.com/coredns/coredns/plugin/pkg/tls"

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

// Launch starts an etcd server with its data in dir and waits until it answers. The caller
// stops it with Stop.
func Launch(dir string) (*Server, error) { return LaunchTLS(dir, nil) }

// LaunchTLS is Launch with TLS on the client URL when t is not nil.
func LaunchTLS(dir string, t *TLS) (*Server, error) {
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
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	pport, err := freePort()
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if t != nil {
		scheme = "https"
	}
	s := &Server{
		Endpoint: scheme + "://127.0.0.1:" + strconv.Itoa(cport),
		bin:      bin,
		dir:      dir,
		name:     "etcdtest",
		peer:     "http://127.0.0.1:" + strconv.Itoa(pport),
	}
	s.args = []string{
		"--name", s.name,
		"--data-dir", dir,
		"--listen-client-urls", s.Endpoint,
		"--advertise-client-urls", s.Endpoint,
		"--listen-peer-urls", s.peer,
		"--initial-advertise-peer-urls", s.peer,
		"--initial-cluster", s.name + "=" + s.peer,
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
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// New launches a server for tb, in a temporary directory, and stops it when tb ends. It fails
// tb when etcd cannot start, the binary missing included.
func New(tb testing.TB) *Server {
	tb.Helper()
	return NewTLS(tb, nil)
}

// NewTLS is New with TLS when t is not nil.
func NewTLS(tb testing.TB, t *TLS) *Server {
	tb.Helper()
	s, err := LaunchTLS(tb.TempDir(), t)
	if err != nil {
		tb.Fatalf("etcd: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Start starts the server again after Stop, on the same ports and data, and waits until it
// answers.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("etcd already running")
	}
	var err error
	for range 50 { // the ports may still be held for a moment after a stop
		cmd := exec.Command(s.bin, s.args...) //nolint:gosec // the test's own binary and arguments
		cmd.Stdout = os.Stderr
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err = cmd.Start(); err != nil {
			return err
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		if err = waitReady(s.Endpoint, s.tls, done); err == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		_ = cmd.Process.Kill()
		<-done
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("etcd did not start: %w", err)
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
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd, s.done = nil, nil
}

// Client returns a client of the server, closed when tb ends.
func (s *Server) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, TLS: s.tls, Logger: zap.NewNop()})
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
