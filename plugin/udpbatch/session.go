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

// miekg/dns exports what an answer needs but three things: the listener socket (field udp of its
// response writer), the control message that carried the address the query was sent to (field
// context of the SessionUDP in field udpSession), and the writer of the response, which the
// decorator returned (field writer). Those are read here, and nothing else: the client's address
// comes from the exported RemoteAddr. The fields' names and types are checked once per writer
// type; when they do not match (another miekg/dns version), the writer is not decorated and
// answers are written as without udpbatch.

// layout is where the fields are in one writer type.
type layout struct {
	typ     reflect.Type // the writer type (miekg/dns's *response) the offsets belong to
	ok      bool         // the fields exist with the expected types
	udp     uintptr      // offset of udp (net.PacketConn)
	session uintptr      // offset of udpSession (*dns.SessionUDP)
	writer  uintptr      // offset of writer (dns.Writer)
}

// known is the layout of miekg/dns's UDP writer, once checked and found to match; unknown is the
// last writer type found not to. In a process there is one writer type.
var known, unknown atomic.Pointer[layout]

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

// layoutOf checks the fields of writer type t.
func layoutOf(t reflect.Type) *layout {
	l := &layout{typ: t}
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || !sessionContextOK {
		return l
	}
	udp, ok1 := fieldOffset(t.Elem(), "udp", reflect.TypeFor[net.PacketConn]())
	ses, ok2 := fieldOffset(t.Elem(), "udpSession", reflect.TypeFor[*dns.SessionUDP]())
	wr, ok3 := fieldOffset(t.Elem(), "writer", reflect.TypeFor[dns.Writer]())
	l.ok, l.udp, l.session, l.writer = ok1 && ok2 && ok3, udp, ses, wr
	return l
}

// layoutFor returns the layout of w's type, checked once per type.
func layoutFor(w any) *layout {
	t := reflect.TypeOf(w)
	if l := known.Load(); l != nil && l.typ == t {
		return l
	}
	if l := unknown.Load(); l != nil && l.typ == t {
		return l
	}
	l := layoutOf(t)
	if l.ok {
		known.Store(l)
	} else {
		unknown.Store(l)
	}
	return l
}

// field returns a pointer to the field at offset of the struct w points to. Only for a w whose
// layout is ok.
func field[T any](w any, offset uintptr) *T {
	return (*T)(unsafe.Add(reflect.ValueOf(w).UnsafePointer(), offset))
}

// conn returns the listener socket miekg/dns's writer w (of layout l) answers on, or nil when
// it is no *net.UDPConn (a PROXY protocol listener, a TCP writer).
func (l *layout) conn(w dns.ResponseWriter) *net.UDPConn {
	c, _ := (*field[net.PacketConn](w, l.udp)).(*net.UDPConn)
	return c
}

// oob returns the control message received with the query miekg/dns's writer w answers. It is
// miekg/dns's: valid while the handler runs, not to be kept.
func (l *layout) oob(w dns.ResponseWriter) []byte {
	s := *field[*dns.SessionUDP](w, l.session)
	if s == nil {
		return nil
	}
	return *(*[]byte)(unsafe.Add(unsafe.Pointer(s), sessionContext))
}

// decorated returns the writer the decorator gave miekg/dns's writer w.
func (l *layout) decorated(w dns.ResponseWriter) dns.Writer { return *field[dns.Writer](w, l.writer) }

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
