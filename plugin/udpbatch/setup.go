package udpbatch

import (
	"strconv"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	pkgparse "github.com/coredns/coredns/plugin/pkg/parse"
	"github.com/coredns/coredns/plugin/pkg/transport"
)

const pluginName = "udpbatch"

var log = clog.NewWithPlugin(pluginName)

const (
	defaultMax = 64
	// maxMax is Linux's UIO_MAXIOV, the most messages one sendmmsg takes.
	maxMax = 1024
)

func init() { plugin.Register(pluginName, setup) }

func setup(c *caddy.Controller) error {
	u, err := parse(c)
	if err != nil {
		return plugin.Error(pluginName, err)
	}
	cfg := dnsserver.GetConfig(c)
	if cfg.UDPDecorateWriterFunc != nil {
		// Only one decorator per server block: the last one set would win silently.
		return plugin.Error(pluginName, c.Err("another plugin of this server block (shed?) already decorates UDP writes; use one of them"))
	}
	cfg.UDPDecorateWriterFunc = u.decorator
	cfg.AddPlugin(func(next plugin.Handler) plugin.Handler {
		u.Next = next
		return u
	})
	// The instance keeps its directives, so tests can reach the sockets of a running server.
	list, _ := c.Get(instanceKey{}).([]*UDPBatch)
	c.Set(instanceKey{}, append(list, u))
	return nil
}

type instanceKey struct{}

// parse reads the directive: `udpbatch [MAX]`.
func parse(c *caddy.Controller) (*UDPBatch, error) {
	u := New()
	i := 0
	for c.Next() {
		if i > 0 {
			return nil, plugin.ErrOnce
		}
		i++
		// The hook exists only on plain DNS UDP listeners; elsewhere the directive would do
		// nothing, silently. Every key: the directives of a block apply to all of them.
		for _, key := range c.ServerBlockKeys {
			if tr, _ := pkgparse.Transport(key); tr != transport.DNS {
				return nil, c.Errf("only plain DNS server blocks are supported; %q uses transport %q", key, tr)
			}
		}
		args := c.RemainingArgs()
		switch len(args) {
		case 0:
		case 1:
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 || n > maxMax {
				return nil, c.Errf("max %q: want a whole number of answers per system call from 1 to %d", args[0], maxMax)
			}
			u.Max = n
		default:
			return nil, c.ArgErr()
		}
		if c.NextBlock() {
			return nil, c.Errf("unknown property %q: udpbatch takes no block", c.Val())
		}
	}
	return u, nil
}
