// Command demo starts the backends and resolvers that Corefile.example points at, runs the coredns
// binary on it, and walks through what the plugins do: answers for clients in two regions, a
// failover when backends stop and the way back, and the source addresses the resolvers see.
//
// Everything listens on 127.0.0.0/8. Every process it starts is stopped on exit, also on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

func main() {
	bin := flag.String("coredns", "bin/coredns", "the coredns binary to run")
	conf := flag.String("conf", "Corefile.example", "the Corefile to serve")
	logPath := flag.String("log", "bin/demo-coredns.log", "where the server's own output goes")
	hold := flag.Duration("hold", 0, "keep everything running this long after the walk (docs/screenshot.sh uses it)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{}
	err := d.run(ctx, *bin, *conf, *logPath)
	if err == nil && *hold > 0 {
		fmt.Printf("\nHolding for %s: the status page stays up at %s\n", *hold, statusURL)
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(*hold):
		}
	}
	d.cleanup()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Println("\nInterrupted; everything the demo started is stopped.")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

const (
	statusURL = "http://127.0.0.1:8182/" // the status plugin of Corefile.example
	server    = "127.0.0.1:1053"
	usCli     = "127.0.1.10" // a client in us-east1's subnet
	euCli     = "127.0.2.10" // a client in europe-west1's subnet
)

// The web backends of Corefile.example, all serving /healthz on port 8080.
var backends = []string{
	"127.0.10.11", "127.0.10.12", "127.0.10.13",
	"127.0.20.11", "127.0.20.12", "127.0.20.13",
	"127.0.30.11", "127.0.30.12",
}

type demo struct {
	mu        sync.Mutex
	web       map[string]*http.Server
	resolvers []*resolver
	coredns   *exec.Cmd
}

func (d *demo) run(ctx context.Context, bin, conf, logPath string) error {
	d.web = make(map[string]*http.Server)
	for _, b := range backends {
		if err := d.startWeb(b); err != nil {
			return err
		}
	}
	for _, a := range []string{"127.0.40.1:5300", "127.0.40.2:5300"} {
		r, err := startResolver(a)
		if err != nil {
			return err
		}
		d.resolvers = append(d.resolvers, r)
	}
	fmt.Printf("Started %d web backends (127.0.{10,20,30}.x:8080) and 2 resolvers (127.0.40.{1,2}:5300).\n", len(backends))

	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "-conf", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s (run `make build` first): %w", bin, err)
	}
	d.coredns = cmd
	fmt.Printf("Started %s -conf %s (its log: %s); waiting for every target's first verdict...\n", bin, conf, logPath)
	if err := waitReady(ctx, "http://127.0.0.1:8181/ready", 30*time.Second); err != nil {
		return err
	}

	fmt.Printf("The status page: %s (live while the demo runs; explain at %sexplain)\n", statusURL, statusURL)

	step("1. Geolocation: clients in two regions ask for app.coresteer.example")
	show(usCli, "app.coresteer.example")
	show(euCli, "app.coresteer.example")

	step("2. Weighted round robin 90/10: 200 queries for www.coresteer.example")
	split(usCli, "www.coresteer.example", 200)

	step("3. Cross-region failover of a published service (pschealth composites)")
	show(usCli, "shop.coresteer.example")

	step("4. Stop the us-east1 backends 127.0.10.11 and 127.0.10.12")
	start := time.Now()
	d.stopWeb("127.0.10.11")
	d.stopWeb("127.0.10.12")
	if err := waitAnswer(ctx, usCli, "app.coresteer.example", "127.0.20.", 30*time.Second); err != nil {
		return err
	}
	fmt.Printf("   after %.1fs (2 failed probes at a 1s interval) answers moved:\n", time.Since(start).Seconds())
	show(usCli, "app.coresteer.example")
	if err := explain(usCli, "app.coresteer.example"); err != nil {
		return err
	}
	if err := waitAnswer(ctx, usCli, "shop.coresteer.example", "127.0.20.100", 30*time.Second); err != nil {
		return err
	}
	show(usCli, "shop.coresteer.example")
	fmt.Println("   (shop-us-web has 1 of 3 backends healthy, under its policy of 60 % and 2: shop fails over to europe-west1)")

	step("5. Restore them")
	start = time.Now()
	if err := d.startWeb("127.0.10.11"); err != nil {
		return err
	}
	if err := d.startWeb("127.0.10.12"); err != nil {
		return err
	}
	if err := waitAnswer(ctx, usCli, "shop.coresteer.example", "127.0.10.100", 30*time.Second); err != nil {
		return err
	}
	if err := waitAnswer(ctx, usCli, "app.coresteer.example", "127.0.10.11 127.0.10.12", 30*time.Second); err != nil {
		return err
	}
	fmt.Printf("   after %.1fs (2 good probes) answers are back:\n", time.Since(start).Seconds())
	show(usCli, "app.coresteer.example")
	show(usCli, "shop.coresteer.example")

	step("6. Forwarding through egress endpoints: clients in two regions ask for db.corp.internal")
	for _, r := range d.resolvers {
		r.reset()
	}
	show(usCli, "db.corp.internal")
	show(euCli, "db.corp.internal")
	for _, r := range d.resolvers {
		if seen := r.sources(); len(seen) > 0 {
			fmt.Printf("   resolver %s saw queries from %s\n", r.addr, strings.Join(seen, ", "))
		}
	}
	fmt.Println("   (egress-us leaves from 127.0.41.1, egress-eu from 127.0.42.1: each region its nearest endpoint)")
	fmt.Printf("\nDone. Metrics: http://127.0.0.1:9153/metrics and the status page %s while a server runs (`make run`).\n", statusURL)
	return nil
}

func step(s string) { fmt.Printf("\n%s\n", s) }

// query asks the server for name from the client address from.
func query(from, name string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Timeout: 3 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(from)}}}
	r, _, err := c.Exchange(m, server)
	return r, err
}

func answers(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

func show(from, name string) {
	r, err := query(from, name)
	if err != nil {
		fmt.Printf("   from %s: %s -> error %v\n", from, name, err)
		return
	}
	fmt.Printf("   $ kdig -b %s @127.0.0.1 -p 1053 +short %s\n   %s %s\n", from, name,
		dns.RcodeToString[r.Rcode], strings.Join(answers(r), " "))
}

func split(from, name string, n int) {
	count := map[string]int{}
	for range n {
		r, err := query(from, name)
		if err != nil {
			continue
		}
		count[strings.Join(answers(r), " ")]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("   %-14s %3d answers (%.0f %%)\n", k, count[k], 100*float64(count[k])/float64(n))
	}
}

// waitAnswer polls until name, asked from from, has answers (sorted, space-separated) that
// start with prefix.
func waitAnswer(ctx context.Context, from, name, prefix string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if r, err := query(from, name); err == nil {
			if a := answers(r); len(a) > 0 && strings.HasPrefix(strings.Join(a, " "), prefix) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s from %s did not answer %s* within %s", name, from, prefix, limit)
}

func waitReady(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url) //nolint:gosec,noctx // a fixed loopback URL
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the server was not ready at %s within %s", url, limit)
}

func (d *demo) startWeb(addr string) error {
	ln, err := net.Listen("tcp", addr+":8080")
	if err != nil {
		return fmt.Errorf("web backend %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	d.mu.Lock()
	d.web[addr] = srv
	d.mu.Unlock()
	return nil
}

func (d *demo) stopWeb(addr string) {
	d.mu.Lock()
	srv := d.web[addr]
	delete(d.web, addr)
	d.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (d *demo) cleanup() {
	if d.coredns != nil && d.coredns.Process != nil {
		_ = syscall.Kill(-d.coredns.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = d.coredns.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-d.coredns.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	d.mu.Lock()
	for a, srv := range d.web {
		_ = srv.Close()
		delete(d.web, a)
	}
	d.mu.Unlock()
	for _, r := range d.resolvers {
		r.stop()
	}
}
