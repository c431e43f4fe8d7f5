// Command tcpsink listens on -count consecutive loopback addresses starting at -base, all on -port, and
// accepts connections: the health-check targets of the benchmarks (a TCP check succeeds on connect; with
// -http every connection gets `HTTP/1.0 200 OK`). It exits by itself after -duration and prints how many
// connections it accepted. Only loopback addresses (127.0.0.0/8) are allowed.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	base := flag.String("base", "127.0.0.1", "first loopback address")
	count := flag.Int("count", 1, "number of consecutive addresses (1-65536)")
	port := flag.Int("port", 8053, "TCP port on every address")
	httpMode := flag.Bool("http", false, "answer every connection with HTTP/1.0 200 OK")
	duration := flag.Duration("duration", 5*time.Minute, "exit after this long (at most 1h)")
	flag.Parse()
	if err := run(*base, *count, *port, *httpMode, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "tcpsink:", err)
		os.Exit(1)
	}
}

// addrs returns count consecutive addresses from base, all inside 127.0.0.0/8.
func addrs(base string, count int) ([]netip.Addr, error) {
	a, err := netip.ParseAddr(base)
	if err != nil || !a.Is4() || !a.IsLoopback() {
		return nil, fmt.Errorf("-base %q is not an IPv4 loopback address (allowed: 127.0.0.0/8)", base)
	}
	if count < 1 || count > 65536 {
		return nil, fmt.Errorf("-count %d is out of range (allowed 1-65536)", count)
	}
	out := make([]netip.Addr, 0, count)
	for range count {
		if !a.IsValid() || !a.IsLoopback() {
			return nil, fmt.Errorf("-base %s with -count %d leaves 127.0.0.0/8", base, count)
		}
		out = append(out, a)
		a = a.Next()
	}
	return out, nil
}

func run(base string, count, port int, httpMode bool, duration time.Duration) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("-port %d is out of range (allowed 1-65535)", port)
	}
	if duration <= 0 || duration > time.Hour {
		return fmt.Errorf("-duration %s is out of range (allowed >0 to 1h)", duration)
	}
	as, err := addrs(base, count)
	if err != nil {
		return err
	}
	var ls []net.Listener
	closeAll := func() {
		for _, l := range ls {
			l.Close()
		}
	}
	for _, a := range as {
		l, err := net.Listen("tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err != nil {
			closeAll()
			return err
		}
		ls = append(ls, l)
	}
	fmt.Printf("listening=%d\n", len(ls))
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue
				}
				accepted.Add(1)
				if !httpMode {
					c.Close()
					continue
				}
				go serveHTTP(c)
			}
		})
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-time.After(duration):
	case <-sig:
	}
	closeAll()
	wg.Wait()
	fmt.Printf("accepted=%d\n", accepted.Load())
	return nil
}

func serveHTTP(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil || line == "\r\n" || line == "\n" {
			break
		}
	}
	fmt.Fprint(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
}
