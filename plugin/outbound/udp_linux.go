package outbound

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/net/ipv4"
)

// batchReader reads a batch of datagrams with one recvmmsg.
type batchReader struct {
	pc *ipv4.PacketConn
	ms []ipv4.Message
}

func newBatchReader(c *net.UDPConn) *batchReader {
	r := &batchReader{pc: ipv4.NewPacketConn(c), ms: make([]ipv4.Message, readBatch)}
	for i := range r.ms {
		r.ms[i].Buffers = make([][]byte, 1)
	}
	return r
}

// read fills bufs with the datagrams that wait, at least one, and says in got how much of each
// buffer holds one and whether the kernel cut it (MSG_TRUNC).
func (r *batchReader) read(bufs []*[]byte, got []received) (int, error) {
	for i, b := range bufs {
		r.ms[i].Buffers[0] = *b
	}
	n, err := r.pc.ReadBatch(r.ms[:len(bufs)], 0)
	n = max(n, 0)
	for i := range r.ms[:n] {
		got[i] = received{n: r.ms[i].N, cut: r.ms[i].Flags&syscall.MSG_TRUNC != 0}
	}
	return n, err
}

// unreachable tells the errors an ICMP message leaves on a connected UDP socket.
func unreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
