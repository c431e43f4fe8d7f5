//go:build linux

package udpbatch

import "golang.org/x/sys/unix"

// unreadQueries reports whether datagrams wait in the socket's receive queue, not yet read by
// miekg/dns (SIOCINQ gives the size of the next one): queries whose handlers are not even
// started. Called by the sender only.
func (s *socket) unreadQueries() bool {
	if s.rc == nil {
		return false
	}
	if s.inqFn == nil {
		s.inqFn = func(fd uintptr) { s.inq, s.inqErr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }
	}
	if err := s.rc.Control(s.inqFn); err != nil || s.inqErr != nil {
		return false
	}
	return s.inq > 0
}
