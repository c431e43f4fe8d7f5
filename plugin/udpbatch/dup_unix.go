//go:build unix

package udpbatch

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// duplicate returns a connection on a new descriptor of src's socket. Not src.File(): the Fd of
// that file puts the socket, shared with src, in blocking mode for a moment, and a reader of src
// that enters recvmsg then blocks past its deadline (a server that never stops). A descriptor
// given to os.NewFile keeps its mode.
func duplicate(src *net.UDPConn) (*net.UDPConn, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if dupErr != nil {
		return nil, os.NewSyscallError("fcntl", dupErr)
	}
	f := os.NewFile(uintptr(fd), "udpbatch")
	defer f.Close()
	c, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}
