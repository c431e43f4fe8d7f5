// Package udpbatch sends the UDP answers of a server block with as few system calls as the load
// allows. It decorates miekg/dns's UDP writer (dnsserver.Config.UDPDecorateWriterFunc, as the
// in-tree shed plugin does) and, in the chain, the ResponseWriter's Write: a handler queues its
// answer and waits until it has been sent; the handler that finds no one sending sends the queue
// with one sendmmsg, each answer with its own source address (the session's IP_PKTINFO /
// IPV6_PKTINFO), and hands what queued meanwhile to the next (group commit). Idle, an answer
// leaves alone and at once; under load, batches grow with the load. No timer, no goroutine, no
// descriptor of its own. It answers no query itself.
package udpbatch

import (
	"context"
	"runtime"
	"sync"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"

	"github.com/miekg/dns"
)

// UDPBatch is one udpbatch directive: the sockets of the servers it decorates.
type UDPBatch struct {
	// Max is the largest number of answers sent with one sendmmsg.
	Max int

	mu      sync.Mutex
	sockets []*socket // for tests: the sockets of a running server

	Next plugin.Handler
}

// New returns a UDPBatch with the default batch size.
func New() *UDPBatch { return &UDPBatch{Max: defaultMax} }

// decorator is installed as Config.UDPDecorateWriterFunc: dnsserver calls it once per UDP
// listener socket when the socket starts serving; miekg/dns applies what it returns to the writer
// of every query on that socket.
func (u *UDPBatch) decorator(srv *dnsserver.Server) dns.DecorateWriter {
	if runtime.GOOS != "linux" {
		log.Infof("Batching is off on %s: sendmmsg is Linux-only; answers are written one by one, as without udpbatch", srv.Address())
		return nil
	}
	s := newSocket(srv.Address(), u.Max)
	u.mu.Lock()
	u.sockets = append(u.sockets, s)
	u.mu.Unlock()
	return s.decorate
}

// ServeDNS implements the plugin.Handler interface. miekg/dns writes the bytes a plugin gives
// the ResponseWriter's Write straight to the socket, past the decorated writer: for those,
// ServeDNS puts the decorated writer of this answer under the ScrubWriter that dnsserver wraps
// every ResponseWriter in, beneath every plugin's wrapper, so Write goes through the batch too
// (and through those wrappers, as before), and WriteMsg as before.
func (u *UDPBatch) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	if sw := scrubWriter(w); sw != nil {
		if bw := batched(sw.ResponseWriter); bw != nil {
			sw.ResponseWriter = bw
		}
	} else if bw := batched(w); bw != nil {
		w = bw
	}
	return plugin.NextOrFailure(u.Name(), u.Next, ctx, w, r)
}

// Name implements the plugin.Handler interface.
func (u *UDPBatch) Name() string { return pluginName }
