package udpbatch

import (
	"net"
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// miekg/dns keeps what a UDP answer needs in unexported fields of its response writer: the
// listener socket (field udp) and the session (field udpSession: the client's address and the
// control message that carried the address the query was sent to). It writes each answer with
// WriteToSessionUDP, one sendmsg. To send several answers in one sendmmsg we read the same fields.
// Their names and types are checked once per writer type; when they do not match (another
// miekg/dns version), session reports false and every answer is written by miekg/dns as before.

// layout is where the fields are in one writer type.
type layout struct {
	typ     reflect.Type // the writer type (*dns.response) the offsets belong to
	ok      bool         // the fields exist with the expected types
	udp     uintptr      // offset of udp (net.PacketConn)
	session uintptr      // offset of udpSession (*dns.SessionUDP)
}

// lastLayout is the layout of the last writer type seen: in a process there is one.
var lastLayout atomic.Pointer[layout]

// sessionContext is the offset of SessionUDP.context (the control message received with the
// query), and whether that field exists with that type.
var sessionContext, sessionContextOK = fieldOffset(reflect.TypeFor[dns.SessionUDP](), "context", reflect.TypeFor[[]byte]())

func fieldOffset(t reflect.Type, name string, want reflect.Type) (uintptr, bool) {
	f, ok := t.FieldByName(name)
	if !ok || len(f.Index) != 1 || f.Type != want {
		return 0, false
	}
	return f.Offset, true
}

func layoutOf(t reflect.Type) *layout {
	l := &layout{typ: t}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || !sessionContextOK {
		return l
	}
	udp, ok1 := fieldOffset(t.Elem(), "udp", reflect.TypeFor[net.PacketConn]())
	ses, ok2 := fieldOffset(t.Elem(), "udpSession", reflect.TypeFor[*dns.SessionUDP]())
	l.ok, l.udp, l.session = ok1 && ok2, udp, ses
	return l
}

// session returns the listener socket, the client's address and the received control message of
// the answer w writes, or false when w is not a miekg/dns UDP writer on a *net.UDPConn (a TCP
// writer, a PROXY protocol listener, an unknown miekg/dns version).
func session(w dns.Writer) (conn *net.UDPConn, raddr net.Addr, oob []byte, ok bool) {
	t := reflect.TypeOf(w)
	l := lastLayout.Load()
	if l == nil || l.typ != t {
		l = layoutOf(t)
		lastLayout.Store(l)
		if !l.ok {
			log.Warningf("Unknown miekg/dns writer %v: answers are written one by one", t)
		}
	}
	if !l.ok {
		return nil, nil, nil, false
	}
	p := reflect.ValueOf(w).UnsafePointer()
	if p == nil {
		return nil, nil, nil, false
	}
	pc := *(*net.PacketConn)(unsafe.Add(p, l.udp))
	s := *(**dns.SessionUDP)(unsafe.Add(p, l.session))
	conn, isUDP := pc.(*net.UDPConn)
	if !isUDP || s == nil {
		return nil, nil, nil, false
	}
	raddr, oob = sessionData(s)
	return conn, raddr, oob, true
}

// sessionData returns the client's address and the received control message of s. Only when
// sessionContextOK.
func sessionData(s *dns.SessionUDP) (net.Addr, []byte) {
	return s.RemoteAddr(), *(*[]byte)(unsafe.Add(unsafe.Pointer(s), sessionContext))
}

// replyOOB is the control message of an answer to a query received with oob: the query's
// destination address as the answer's source, so a client that asked one address of a wildcard
// listener hears from that address. It is miekg/dns's correctSource, the same bytes.
func replyOOB(oob []byte) (reply []byte) {
	// x/net's Parse panics on some malformed messages (an IPPROTO_IP message of type 0). The
	// kernel never sends those; should one come, the answer goes without a source, as from a
	// listener bound to one address.
	defer func() {
		if recover() != nil {
			reply = nil
		}
	}()
	var dst net.IP
	cm6 := new(ipv6.ControlMessage)
	if cm6.Parse(oob) == nil && cm6.Dst != nil {
		dst = cm6.Dst
	} else {
		cm4 := new(ipv4.ControlMessage)
		if cm4.Parse(oob) == nil && cm4.Dst != nil {
			dst = cm4.Dst
		}
	}
	if dst == nil {
		return nil
	}
	if dst.To4() == nil {
		return (&ipv6.ControlMessage{Src: dst}).Marshal()
	}
	return (&ipv4.ControlMessage{Src: dst}).Marshal()
}
