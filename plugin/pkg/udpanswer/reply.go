package udpanswer

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// ReplyOOB is the control message of an answer to a query received with oob: the query's
// destination address as the answer's source, so a client that asked one address of a wildcard
// listener hears from that address. It is miekg/dns's correctSource, the same bytes, made anew
// (about 0.5 µs and seven allocations): Reply remembers them.
func ReplyOOB(oob []byte) []byte { return replyFrom(queryDst(oob)) }

// replyFrom is the control message that makes dst an answer's source: none when dst is nil.
func replyFrom(dst net.IP) []byte {
	if dst == nil {
		return nil
	}
	if dst.To4() == nil {
		return (&ipv6.ControlMessage{Src: dst}).Marshal()
	}
	return (&ipv4.ControlMessage{Src: dst}).Marshal()
}

// queryDst is the query's destination address in oob, or nil when it names none.
func queryDst(oob []byte) (dst net.IP) {
	// x/net's Parse panics on some malformed messages (an IPPROTO_IP message of type 0). The
	// kernel never sends those; should one come, the answer goes without a source, as from a
	// listener bound to one address.
	defer func() {
		if recover() != nil {
			dst = nil
		}
	}()
	cm6 := new(ipv6.ControlMessage)
	if cm6.Parse(oob) == nil && cm6.Dst != nil {
		return cm6.Dst
	}
	cm4 := new(ipv4.ControlMessage)
	if cm4.Parse(oob) == nil && cm4.Dst != nil {
		return cm4.Dst
	}
	return nil
}

// replyCacheSize is the most received control messages whose reply is remembered. A received
// message names the local address the query was sent to and the interface it came in on, so a
// server has one per address and interface it is asked on: a few, or one per pod interface on a
// node. When the cache is full it is emptied and fills again with the messages still in use.
const replyCacheSize = 1024

// answerOOB is what is remembered of a received control message: the reply's (ReplyOOB) and
// the query's destination address.
type answerOOB struct {
	reply []byte
	dst   netip.Addr
}

var replies = struct {
	sync.RWMutex
	m map[string]*answerOOB
}{m: make(map[string]*answerOOB)}

// remembered returns what is remembered of oob, made on first sight: keyed by the received
// message's bytes, a message seen before costs no parse and no allocation.
func remembered(oob []byte) *answerOOB {
	replies.RLock()
	a, ok := replies.m[string(oob)]
	replies.RUnlock()
	if ok {
		return a
	}
	return remember(oob)
}

// remember makes and keeps what remembered returns for a message not seen before. It is kept
// out of line: remembered runs on the answer's send, the deepest point of a query on the
// goroutine miekg/dns serves it on, and its frame is that goroutine's stack; 16 more octets in it
// (the first version of this split, inlined) made udpbatch's answers grow the stack every query
// and cost it about a fifth of its speed (bench/ab --pair udpbatch, 2026-12-02).
//
//go:noinline
func remember(oob []byte) *answerOOB {
	a := new(answerOOB)
	dst := queryDst(oob)
	a.reply = replyFrom(dst)
	if d, ok := netip.AddrFromSlice(dst); ok {
		a.dst = d.Unmap()
	}
	replies.Lock()
	if len(replies.m) >= replyCacheSize {
		clear(replies.m)
	}
	replies.m[string(oob)] = a
	replies.Unlock()
	return a
}

// Reply returns ReplyOOB(oob), remembered for the process. The slice is shared: not to be changed.
func Reply(oob []byte) []byte { return remembered(oob).reply }

// ReplyOn returns the control message of an answer sent on conn to a query received with oob:
// none when conn is bound to one address and the query was sent to that address, which the
// kernel then takes as the source anyway (it spares the kernel the message's parse on every
// send); otherwise Reply(oob): on a listener bound to every address (0.0.0.0, ::), and on a bound
// one that the kernel handed a query for another address (an sk_lookup program, TPROXY), the
// answer leaves from the address asked. (A listener bound to a broadcast address, which has no
// source address of its own, answers from the address the route gives; miekg/dns's sendmsg with
// the broadcast address as the source fails.)
func ReplyOn(conn *net.UDPConn, oob []byte) []byte {
	a := remembered(oob)
	if l, ok := conn.LocalAddr().(*net.UDPAddr); ok && a.dst.IsValid() && !l.IP.IsUnspecified() {
		if la, ok := netip.AddrFromSlice(l.IP); ok && la.Unmap() == a.dst {
			return nil
		}
	}
	return a.reply
}
