package udpanswer

import (
	"errors"
	"net"

	"github.com/miekg/dns"
)

// Direct is miekg/dns's writer of one UDP query with a Write of its own: it sends the bytes
// with the same system call, to the same client, from the same local address as miekg/dns's
// Write, but with the reply's control message remembered (Reply) instead of parsed and made
// for every answer, and none from a listener bound to one address (ReplyOn). Everything else
// (WriteMsg, addresses, Close, TSIG) is miekg/dns's writer's.
// A handler puts it beneath the wrappers of the plugins before it, where miekg/dns's writer
// was, for the time of one Write, so they see the write as before.
type Direct struct {
	dns.ResponseWriter
	conn *net.UDPConn
	addr *net.UDPAddr
	oob  []byte
	send sender // what the send keeps between answers (sender_raw.go; sender_net.go elsewhere)
}

// Reset makes d the writer of w's answer and reports whether it can be: w is miekg/dns's writer
// of a query received on a *net.UDPConn, and no decorator replaces its writer (shed, udpbatch:
// what they send must go through them).
func (d *Direct) Reset(w dns.ResponseWriter) bool {
	l := LayoutFor(w)
	if !l.OK() {
		return false
	}
	conn := l.Conn(w)
	addr, _ := w.RemoteAddr().(*net.UDPAddr)
	if decorated, _ := IsDecorated(w); conn == nil || addr == nil || decorated {
		return false
	}
	d.ResponseWriter, d.conn, d.addr, d.oob = w, conn, addr, ReplyOn(conn, l.OOB(w))
	return true
}

// Clear forgets the query's writer, so nothing of it outlives the answer. (What the send keeps
// of the listener socket it last sent on stays, for the next answer: see sender.)
func (d *Direct) Clear() {
	d.ResponseWriter, d.conn, d.addr, d.oob = nil, nil, nil, nil
	d.send.clear()
}

// Write sends b to the client as miekg/dns's Write does (WriteToSessionUDP): one sendmsg, to the
// same address, with the same control message, through the socket's poller (deadlines, a full
// send buffer), but made here (sender), without the net package's socket address allocated for
// every answer and its layers of calls.
// A Direct that has no query's writer (cleared) writes nothing and says so.
func (d *Direct) Write(b []byte) (int, error) {
	if d.conn == nil {
		return 0, noQuery()
	}
	return d.send.write(d, b)
}

// noQuery is the error of a Write with no query to answer: made for each, as the net package makes
// its errors, so no caller changes another's. Out of line, so Write's frame stays as small as the
// send path needs (a deeper one can make the query's goroutine grow its stack: README).
//
//go:noinline
func noQuery() error {
	return &net.OpError{Op: "write", Net: "udp", Err: errors.New("udpanswer.Direct: no query to answer (not Reset)")}
}

// writeMsgUDP is Write through the net package, as miekg/dns sends: for what the sender does
// not make itself.
func (d *Direct) writeMsgUDP(b []byte) (int, error) {
	n, _, err := d.conn.WriteMsgUDP(b, d.oob, d.addr)
	return n, err
}
