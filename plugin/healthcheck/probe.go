package healthcheck

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"
)

// outcome is the result of one probe by one prober.
type outcome uint8

const (
	// noResult: the prober could not run (HC-3); it does not count either way.
	noResult outcome = iota
	success
	failure
)

func (o outcome) String() string {
	switch o {
	case success:
		return "healthy"
	case failure:
		return "unhealthy"
	default:
		return "error"
	}
}

// attempt is what one prober saw.
type attempt struct {
	outcome outcome
	reason  string // why it failed, or why it gave no result
	local   error  // the local error behind noResult, for the log-once message
	// took and at are set by the registry for an attempt that ran: how long it took and when it
	// ended, for the status page's per-region view (S-1).
	took time.Duration
	at   time.Time
}

// prober runs probes of one check from one source address. Probers are built once per check
// and shared by all its targets.
type prober struct {
	region string
	source netip.Addr
	dialer *net.Dialer
	client *http.Client // http and https only
}

func newProber(c *Check, region string, source netip.Addr) *prober {
	// The probe's context carries the timeout; KeepAlive -1: no keep-alive setup per socket.
	p := &prober{region: region, source: source, dialer: &net.Dialer{KeepAlive: -1}}
	if source.IsValid() {
		p.dialer.LocalAddr = &net.TCPAddr{IP: source.AsSlice()}
	}
	if c.Protocol == TCP {
		return p
	}
	tr := &http.Transport{
		Proxy:                  nil, // probes go to the target itself, never through a proxy from the environment
		DialContext:            p.dialer.DialContext,
		DisableKeepAlives:      true, // every probe is a new connection, like a client's first one
		DisableCompression:     true,
		TLSHandshakeTimeout:    c.Timeout,
		ResponseHeaderTimeout:  c.Timeout,
		MaxResponseHeaderBytes: 64 << 10,
		// HC-6: certificates are not verified unless tls_verify is set.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: !c.TLSVerify, ServerName: c.Host}, //nolint:gosec // HC-6
	}
	p.client = &http.Client{
		Transport: tr,
		Timeout:   c.Timeout,
		// A redirect is not a 200: report it, do not follow it.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p
}

// probeURL returns the URL an http(s) check requests from target.
func probeURL(c *Check, target netip.AddrPort) string {
	scheme := "http"
	if c.Protocol == HTTPS {
		scheme = "https"
	}
	return scheme + "://" + target.String() + c.Path
}

// run probes target once. url is the precomputed probeURL for http(s).
func (p *prober) run(ctx context.Context, c *Check, target netip.AddrPort, url string) attempt {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	if c.Protocol == TCP {
		conn, err := p.dialer.DialContext(ctx, "tcp", target.String())
		if err != nil {
			return failed(err)
		}
		// Reset rather than close: no FIN exchange and no TIME_WAIT socket per probe, which
		// at 10,000 targets halves the kernel work (HC-5), as load-balancer health checks do.
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		conn.Close()
		return attempt{outcome: success}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return attempt{outcome: noResult, reason: err.Error(), local: err}
	}
	if c.Host != "" {
		req.Host = c.Host
	}
	req.Header.Set("User-Agent", "coresteer-healthcheck")
	resp, err := p.client.Do(req)
	if err != nil {
		return failed(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return attempt{outcome: failure, reason: fmt.Sprintf("status %d", resp.StatusCode)}
	}
	if c.Content == "" {
		return attempt{outcome: success}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if bytes.Contains(body, []byte(c.Content)) {
		return attempt{outcome: success}
	}
	if err != nil {
		return failed(err)
	}
	return attempt{outcome: failure, reason: fmt.Sprintf("content %q not in the first %d bytes of the body", c.Content, maxBody)}
}

// failed turns a probe error into a failure, or into no result when the error is ours (HC-3).
func failed(err error) attempt {
	if localError(err) {
		return attempt{outcome: noResult, reason: err.Error(), local: err}
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return attempt{outcome: failure, reason: "timeout"}
	}
	return attempt{outcome: failure, reason: trimError(err)}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// trimError keeps the useful tail of a net error ("connection refused" rather than the whole
// "dial tcp 127.0.0.1:0->...: connect: connection refused").
func trimError(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && i+2 < len(s) {
		return s[i+2:]
	}
	return s
}

// localError reports whether err comes from our side of the probe (HC-3): the source address
// cannot be bound, no socket or file descriptor or port is left, or the source address does
// not fit the target's family. These say nothing about the target.
func localError(err error) bool {
	if se, ok := errors.AsType[*os.SyscallError](err); ok {
		switch se.Syscall {
		case "socket", "bind", "setsockopt":
			return true
		}
	}
	if errno, ok := errors.AsType[syscall.Errno](err); ok {
		switch errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.EADDRNOTAVAIL, syscall.ENOBUFS, syscall.ENOMEM:
			return true
		}
	}
	// The source address's family does not fit the target's: Go filters the target out.
	if ae, ok := errors.AsType[*net.AddrError](err); ok && (strings.Contains(ae.Err, "mismatched local address") || strings.Contains(ae.Err, "no suitable address")) {
		return true
	}
	return false
}

// localKind names a local error for the log-once set, without the target in it.
func localKind(err error) string {
	if se, ok := errors.AsType[*os.SyscallError](err); ok {
		return se.Syscall + ": " + se.Err.Error()
	}
	if ae, ok := errors.AsType[*net.AddrError](err); ok {
		return ae.Err
	}
	return trimError(err)
}
