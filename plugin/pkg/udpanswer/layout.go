// Package udpanswer reads what miekg/dns keeps unexported about the UDP query a handler answers
// (its listener socket, the control message it was received with, the writer its server's
// decorator gave it) and sends an answer as miekg/dns does, with the reply's control message
// made once per received control message (local address and interface) instead of once per
// answer. udpbatch batches answers with it;
// routingpolicy sends its packed answers with it (Direct).
package udpanswer

import (
	"net"
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/miekg/dns"
)

// miekg/dns exports what an answer needs but three things: the listener socket (field udp of its
// response writer), the control message that carried the address the query was sent to (field
// context of the SessionUDP in field udpSession), and the writer of the response, which the
// decorator returned (field writer). Those are read here, and nothing else: the client's address
// comes from the exported RemoteAddr. The fields' names and types are checked once per writer
// type; when they do not match (another miekg/dns version, or a platform where miekg/dns keeps
// no control message: SessionUDP has no context there), Layout.OK is false and the callers write
// as miekg/dns does. The writer alone (Decorated) is read where it exists (DecoratedOK).

// Layout is where the fields are in one writer type.
type Layout struct {
	typ      reflect.Type // the writer type (miekg/dns's *response) the offsets belong to
	ok       bool         // the fields exist with the expected types
	okWriter bool         // the field writer exists with its type
	udp      uintptr      // offset of udp (net.PacketConn)
	session  uintptr      // offset of udpSession (*dns.SessionUDP)
	writer   uintptr      // offset of writer (dns.Writer)
}

// known is the layout of miekg/dns's UDP writer, once checked and found to match; unknown is the
// last writer type found not to. In a process there is one writer type.
var known, unknown atomic.Pointer[Layout]

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
func layoutOf(t reflect.Type) *Layout {
	l := &Layout{typ: t}
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct ||
		t.Elem().Name() != "response" || t.Elem().PkgPath() != "github.com/miekg/dns" {
		return l
	}
	udp, ok1 := fieldOffset(t.Elem(), "udp", reflect.TypeFor[net.PacketConn]())
	ses, ok2 := fieldOffset(t.Elem(), "udpSession", reflect.TypeFor[*dns.SessionUDP]())
	wr, ok3 := fieldOffset(t.Elem(), "writer", reflect.TypeFor[dns.Writer]())
	l.ok, l.okWriter, l.udp, l.session, l.writer = ok1 && ok2 && ok3 && sessionContextOK, ok3, udp, ses, wr
	return l
}

// LayoutFor returns the layout of w's type, checked once per type. Its OK says whether w is
// miekg/dns's writer with the fields read here.
func LayoutFor(w any) *Layout {
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

// Known returns the layout of miekg/dns's writer once LayoutFor has found one that is OK, or nil.
func Known() *Layout { return known.Load() }

// OK reports whether the writer type has the fields read here, with their types.
func (l *Layout) OK() bool { return l.ok }

// DecoratedOK reports whether the writer type is miekg/dns's with the field Decorated reads (on
// every platform, where OK may be false for want of the session's control message).
func (l *Layout) DecoratedOK() bool { return l.okWriter }

// Type is the writer type of the layout.
func (l *Layout) Type() reflect.Type { return l.typ }

// field returns a pointer to the field at offset of the struct w points to. Only for a w whose
// layout is ok.
func field[T any](w any, offset uintptr) *T {
	return (*T)(unsafe.Add(reflect.ValueOf(w).UnsafePointer(), offset))
}

// Conn returns the listener socket miekg/dns's writer w (of layout l, OK) answers on, or nil
// when it is no *net.UDPConn (a PROXY protocol listener, a TCP writer).
func (l *Layout) Conn(w dns.ResponseWriter) *net.UDPConn {
	c, _ := (*field[net.PacketConn](w, l.udp)).(*net.UDPConn)
	return c
}

// OOB returns the control message received with the query miekg/dns's writer w (of layout l,
// OK) answers. It is miekg/dns's: valid while the handler runs, not to be kept.
func (l *Layout) OOB(w dns.ResponseWriter) []byte {
	s := *field[*dns.SessionUDP](w, l.session)
	if s == nil {
		return nil
	}
	return *(*[]byte)(unsafe.Add(unsafe.Pointer(s), sessionContext))
}

// Decorated returns the writer the server's decorator gave miekg/dns's writer w (of layout l,
// DecoratedOK): w itself when there is no decorator.
func (l *Layout) Decorated(w dns.ResponseWriter) dns.Writer { return *field[dns.Writer](w, l.writer) }

// IsDecorated reports whether miekg/dns's writer w writes WriteMsg's bytes through a writer a
// server's decorator gave it (shed's, udpbatch's), which its Write passes by; known is false when
// w is not miekg/dns's writer or its field writer cannot be read (another miekg/dns). A nil
// writer counts as not decorated: miekg/dns's WriteMsg would fail on it anyway.
func IsDecorated(w dns.ResponseWriter) (decorated, known bool) {
	l := LayoutFor(w)
	if !l.DecoratedOK() {
		return false, false
	}
	inner := l.Decorated(w)
	return inner != nil && inner != dns.Writer(w), true
}
