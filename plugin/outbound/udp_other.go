//go:build !linux

package outbound

import (
	"errors"
	"net"
	"syscall"
)

// batchReader reads one datagram at a time where recvmmsg is not available.
type batchReader struct{ c *net.UDPConn }

func newBatchReader(c *net.UDPConn) *batchReader { return &batchReader{c: c} }

func (r *batchReader) read(bufs []*[]byte, got []received) (int, error) {
	n, err := r.c.Read(*bufs[0])
	if err != nil {
		return 0, err
	}
	got[0] = received{n: n}
	return 1, nil
}

func unreachable(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
