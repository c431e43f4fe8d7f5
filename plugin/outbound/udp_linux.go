package outbound

import (
	"errors"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is the Linux struct mmsghdr of recvmmsg(2): a msghdr and the length the kernel received
// into it. Go pads it to the msghdr's alignment, as C does (x/sys/unix has Msghdr, not this).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// batchReader reads a batch of datagrams with one recvmmsg, through the socket's RawConn so the
// runtime's poller does the waiting. Nothing is allocated per read or per datagram: the headers,
// the vectors and the callback are made once per socket, the buffers are the reader's. The socket
// is connected: the source address is not asked for.
type batchReader struct {
	rc   syscall.RawConn
	err  error // from SyscallConn: the socket is not usable
	hs   [readBatch]mmsghdr
	iovs [readBatch]unix.Iovec
	vlen int           // headers filled for this read
	got  int           // datagrams the last recvmmsg returned
	errn syscall.Errno // its error
	recv func(fd uintptr) bool
}

func newBatchReader(c *net.UDPConn) *batchReader {
	r := &batchReader{}
	r.rc, r.err = c.SyscallConn()
	for i := range r.hs {
		r.hs[i].hdr.Iov = &r.iovs[i]
		r.hs[i].hdr.SetIovlen(1)
	}
	r.recv = r.recvmmsg
	return r
}

// recvmmsg is RawConn.Read's callback: false asks the poller to wait until the socket is readable
// (EAGAIN), true ends the read with what recvmmsg returned. EINTR is tried again at once.
func (r *batchReader) recvmmsg(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hs[0])), uintptr(r.vlen), 0, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.got, r.errn = int(n), e
		return true
	}
}

// read fills bufs with the datagrams that wait, at least one, and says in got how much of each
// buffer holds one and whether the kernel cut it (MSG_TRUNC). It returns the poller's error when
// the socket is closed (net.ErrClosed) or its read deadline passed, and recvmmsg's error (an ICMP
// unreachable the kernel left on the socket, ECONNREFUSED) otherwise.
func (r *batchReader) read(bufs []*[]byte, got []received) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	r.vlen = min(len(bufs), readBatch)
	for i, b := range bufs[:r.vlen] {
		r.iovs[i].Base = unsafe.SliceData(*b)
		r.iovs[i].SetLen(len(*b))
		r.hs[i].hdr.Flags, r.hs[i].n = 0, 0
	}
	r.got, r.errn = 0, 0
	if err := r.rc.Read(r.recv); err != nil {
		return 0, err
	}
	if r.errn != 0 {
		return 0, os.NewSyscallError("recvmmsg", r.errn)
	}
	for i := range r.got {
		got[i] = received{n: int(r.hs[i].n), cut: r.hs[i].hdr.Flags&unix.MSG_TRUNC != 0}
	}
	return r.got, nil
}

// unreachable tells the errors an ICMP message leaves on a connected UDP socket.
func unreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
