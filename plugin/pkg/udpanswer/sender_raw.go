//go:build linux && !386 && !s390x

package udpanswer

import (
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sender makes Direct's sendmsg itself, on the listener socket's descriptor through its
// syscall.RawConn: the net package's WriteMsgUDP allocates the client's socket address for every
// answer and goes through five layers of calls to the same system call (issue 12). The message
// header, the client's address and the call's result live here, in the Direct a handler reuses
// (routingpolicy pools it), so a send allocates nothing; what a socket needs (its RawConn and
// address family) is kept per socket (sockets).
//
// What the net package does around the call stays: RawConn.Write takes the socket's write lock,
// honours its write deadline, and waits on the poller while the socket's buffer is full (EAGAIN);
// a closed socket is an error, not a write to a descriptor reused since. What this sender does
// not make goes through the net package, with its result: a client address with an IPv6 zone, one
// of the other family on an IPv4 socket, an unspecified address or a port out of range, an empty
// answer, a connected socket. A failed send is the net package's error, word for word. (386 and
// s390x, where sendmsg is not a system call of its own before Linux 4.3, send through the net
// package: sender_net.go.)
type sender struct {
	sock *net.UDPConn // the socket sk is of
	sk   *socket

	self *sender            // the sender fn was made for: a Direct copied makes its own
	fn   func(uintptr) bool // self.sendmsg, made once: a method value made per send allocates
	msg  unix.Msghdr        // the call's argument; Name and Iov point into this sender
	iov  unix.Iovec         // the answer
	name unix.RawSockaddrInet6
	n    int           // the call's result
	err  syscall.Errno // the call's error, or 0
}

// socket is what a send needs of a listener socket.
type socket struct {
	rc     syscall.RawConn // nil for a connected socket
	family int             // SO_DOMAIN (-1: unknown)
	net    string          // the socket's network as the net package names it in errors ("udp", "udp4", "udp6")
	ok     bool            // the sender can send on it: an IPv4 or IPv6 socket, not connected
}

// socketCacheStart is how many sockets are kept before the cache is first pruned: a server has
// one per listener and transport, CoreDNS's multisocket up to 1024 per listener. When the cache is
// full, the sockets closed since they were kept (by a reload, a stopped server) are dropped; if
// half or more of its sockets are still open, it holds twice as many from then on. So a socket in
// use is never looked up again, and the closed ones kept are never more than the open ones.
const socketCacheStart = 1024

var sockets = struct {
	sync.RWMutex
	m     map[*net.UDPConn]*socket
	limit int
}{m: make(map[*net.UDPConn]*socket), limit: socketCacheStart}

// socketOf returns what a send needs of conn: kept, or made on first sight.
func socketOf(conn *net.UDPConn) *socket {
	sockets.RLock()
	sk, ok := sockets.m[conn]
	sockets.RUnlock()
	if ok {
		return sk
	}
	return newSocket(conn)
}

//go:noinline
func newSocket(conn *net.UDPConn) *socket {
	sk := &socket{family: -1, net: "udp"}
	if rc, err := conn.SyscallConn(); err == nil && conn.RemoteAddr() == nil {
		sk.rc = rc
		if rc.Control(func(fd uintptr) {
			if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN); err == nil {
				sk.family = v
			}
		}) != nil {
			return sk // closed: not kept, the net package says so
		}
		// The net package names the socket's network only in its errors: an unconnected socket
		// refuses a write with no address before any system call, with an error that says it.
		if _, _, err := conn.WriteMsgUDP(nil, nil, nil); err != nil {
			if op, ok := err.(*net.OpError); ok && op.Net != "" {
				sk.net = op.Net
			}
		}
		sk.ok = sk.family == unix.AF_INET || sk.family == unix.AF_INET6
	}
	sockets.Lock()
	if len(sockets.m) >= sockets.limit {
		pruneSockets()
	}
	sockets.m[conn] = sk
	sockets.Unlock()
	return sk
}

// pruneSockets drops the sockets closed since they were kept (and connected ones, made again if
// seen again), and doubles the cache's size if half of it or more is still open. It runs with
// sockets locked, when the cache is full; RawConn.Control on a socket only takes a reference to
// its descriptor, so it never blocks.
func pruneSockets() {
	for conn, sk := range sockets.m {
		if sk.rc == nil || sk.rc.Control(func(uintptr) {}) != nil {
			delete(sockets.m, conn)
		}
	}
	if len(sockets.m) >= sockets.limit/2 {
		sockets.limit *= 2
	}
}

// clear drops what points at the last answer and its control message.
func (s *sender) clear() {
	s.iov.Base, s.msg.Control = nil, nil
}

// write sends b as d's answer.
func (s *sender) write(d *Direct, b []byte) (int, error) {
	if len(b) == 0 || d.addr == nil || d.addr.Zone != "" {
		return d.writeMsgUDP(b)
	}
	if s.sock != d.conn {
		s.sock, s.sk = d.conn, socketOf(d.conn)
	}
	if !s.sk.ok {
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
	s.msg.Name = (*byte)(unsafe.Pointer(&s.name))
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
	err := s.sk.rc.Write(s.fn)
	s.clear()
	if op, ok := err.(*net.OpError); ok { // RawConn.Write's "raw-write" (closed, deadline): the cause
		err = op.Err
	} else if err == nil && s.err != 0 {
		err = os.NewSyscallError("sendmsg", s.err)
	}
	if err != nil { // as the net package's WriteMsgUDP says it
		return 0, &net.OpError{Op: "write", Net: s.sk.net, Source: d.conn.LocalAddr(), Addr: d.addr, Err: err}
	}
	return s.n, nil
}

// setName writes addr into s.name as the socket's family takes it (an IPv4 client of an IPv6
// socket as a v4-mapped address, as the net package does) and returns its length; false for
// what the net package treats otherwise (an unspecified address, a port out of range).
func (s *sender) setName(addr *net.UDPAddr) (uint32, bool) {
	if addr.Port < 0 || addr.Port > 0xffff || addr.IP.IsUnspecified() {
		return 0, false
	}
	if s.sk.family == unix.AF_INET {
		ip := addr.IP.To4()
		if ip == nil {
			return 0, false
		}
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.name))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET}
		setPort(&sa.Port, addr.Port)
		copy(sa.Addr[:], ip)
		return unix.SizeofSockaddrInet4, true
	}
	ip := addr.IP.To16()
	if ip == nil {
		return 0, false
	}
	s.name = unix.RawSockaddrInet6{Family: unix.AF_INET6}
	setPort(&s.name.Port, addr.Port)
	copy(s.name.Addr[:], ip)
	return unix.SizeofSockaddrInet6, true
}

// setPort stores port in network byte order.
func setPort(p *uint16, port int) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port) //nolint:gosec // setName lets through 0..65535 only
}

// sendmsg is the system call, made by RawConn.Write with the socket's descriptor: done unless the
// socket's buffer is full (EAGAIN), when Write waits on the poller and calls it again.
func (s *sender) sendmsg(fd uintptr) bool {
	for {
		n, _, errno := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&s.msg)), 0)
		switch errno {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		s.n, s.err = int(n), errno
		return true
	}
}
