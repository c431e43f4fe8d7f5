package udpanswer

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
	"unsafe"
)

// sender makes Direct's sendmsg itself, on the listener socket's descriptor through its
// syscall.RawConn: the net package's WriteMsgUDP allocates the client's socket address for every
// answer and goes through five layers of calls to the same system call (about 5 % of a static
// answer's CPU on the bench, issue 12). The message header, the client's address and the call's
// result live here, in the Direct a handler reuses (routingpolicy pools it), so a send allocates
// nothing; the RawConn and the socket's address family are kept for the socket last sent on.
//
// What the net package does around the call stays: RawConn.Write takes the socket's write lock,
// honours its write deadline, and waits on the poller while the socket's buffer is full (EAGAIN);
// a closed socket is an error, not a write to a descriptor reused since. A client address with an
// IPv6 zone, and one of the other family on an IPv4 socket, go through the net package as before.
type sender struct {
	sock   *net.UDPConn    // the socket rc and family are of
	rc     syscall.RawConn // sock's
	family int             // sock's address family (SO_DOMAIN): AF_INET or AF_INET6

	self *sender            // the sender fn was made for: a Direct copied makes its own
	fn   func(uintptr) bool // self.sendmsg, made once: a method value made per send allocates
	msg  unix.Msghdr        // the call's argument; Name and Iov point into this sender
	iov  unix.Iovec         // the answer
	name [sockaddrSize]byte // the client's address, a RawSockaddrInet4 or RawSockaddrInet6
	n    int                // the call's result
	err  syscall.Errno      // the call's error, or 0
}

const sockaddrSize = unix.SizeofSockaddrInet6

// clear drops what points at the last answer and its control message.
func (s *sender) clear() {
	s.iov.Base, s.msg.Control = nil, nil
}

// write sends b as d's answer.
func (s *sender) write(d *Direct, b []byte) (int, error) {
	if len(b) == 0 || d.addr.Zone != "" {
		return d.writeMsgUDP(b)
	}
	if s.sock != d.conn && !s.use(d.conn) {
		return d.writeMsgUDP(b)
	}
	namelen, ok := s.setName(d.addr)
	if !ok {
		return d.writeMsgUDP(b)
	}
	if s.self != s {
		s.self, s.fn = s, s.sendmsg
	}
	s.iov.Base = &b[0]
	s.iov.SetLen(len(b))
	s.msg.Name = &s.name[0]
	s.msg.Namelen = namelen
	s.msg.Iov = &s.iov
	s.msg.SetIovlen(1)
	s.msg.Control = nil
	s.msg.SetControllen(0)
	if len(d.oob) > 0 {
		s.msg.Control = &d.oob[0]
		s.msg.SetControllen(len(d.oob))
	}
	s.n, s.err = 0, 0
	err := s.rc.Write(s.fn)
	s.clear()
	if err == nil && s.err != 0 {
		err = os.NewSyscallError("sendmsg", s.err)
	}
	if err != nil {
		if op, ok := err.(*net.OpError); ok { // RawConn.Write's "raw-write": the cause, named as below
			err = op.Err
		}
		return 0, &net.OpError{Op: "write", Net: "udp", Source: d.conn.LocalAddr(), Addr: d.addr, Err: err}
	}
	return s.n, nil
}

// use makes conn the socket sent on, and reports whether it can be.
func (s *sender) use(conn *net.UDPConn) bool {
	rc, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	family := -1
	if err := rc.Control(func(fd uintptr) {
		if v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_DOMAIN); err == nil {
			family = v
		}
	}); err != nil || family != syscall.AF_INET && family != syscall.AF_INET6 {
		return false
	}
	s.sock, s.rc, s.family = conn, rc, family
	return true
}

// setName writes addr into s.name as the socket's family takes it (an IPv4 client of an IPv6
// socket as a v4-mapped address, as the net package does) and returns its length.
func (s *sender) setName(addr *net.UDPAddr) (uint32, bool) {
	if s.family == syscall.AF_INET {
		ip := addr.IP.To4()
		if ip == nil {
			return 0, false
		}
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.name))
		*sa = unix.RawSockaddrInet4{Family: syscall.AF_INET}
		setPort(&sa.Port, addr.Port)
		copy(sa.Addr[:], ip)
		return unix.SizeofSockaddrInet4, true
	}
	ip := addr.IP.To16()
	if ip == nil {
		return 0, false
	}
	sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&s.name))
	*sa = unix.RawSockaddrInet6{Family: syscall.AF_INET6}
	setPort(&sa.Port, addr.Port)
	copy(sa.Addr[:], ip)
	return unix.SizeofSockaddrInet6, true
}

// setPort stores port in network byte order.
func setPort(p *uint16, port int) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// sendmsg is the system call, made by RawConn.Write with the socket's descriptor: done unless the
// socket's buffer is full (EAGAIN), when Write waits on the poller and calls it again.
func (s *sender) sendmsg(fd uintptr) bool {
	for {
		n, _, errno := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&s.msg)), 0)
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.n, s.err = int(n), errno
		return true
	}
}
