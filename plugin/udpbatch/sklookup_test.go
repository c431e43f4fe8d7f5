package udpbatch

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// bpf makes one bpf(2) call with attr, the call's union bpf_attr laid out by the caller.
func bpf(t *testing.T, what string, cmd int, attr []byte) int {
	t.Helper()
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if errno != 0 {
		t.Fatalf("bpf %s: %v", what, errno)
	}
	fd := int(r)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// insn is one eBPF instruction: opcode, destination and source registers, offset, immediate.
type insn struct {
	code uint8
	regs uint8
	off  int16
	imm  int32
}

func ins(code, dst, src uint8, off int16, imm int32) insn { return insn{code, dst | src<<4, off, imm} }

// steerUDPPort attaches an sk_lookup program (BPF_PROG_TYPE_SK_LOOKUP, as Cloudflare's tubular
// uses) to the calling thread's network namespace that hands every UDP datagram to port, whatever
// local address it was sent to, to sock: a listener bound to one address then gets queries sent
// to others. The program, its socket map and the link are closed when the test ends.
func steerUDPPort(t *testing.T, sock *net.UDPConn, port int) {
	t.Helper()
	le := binary.LittleEndian
	// The kernel reads what the attributes point to; pinned, so nothing moves it between the
	// pointer's conversion to a number and the call.
	var pin runtime.Pinner
	defer pin.Unpin()
	m := make([]byte, 128)
	le.PutUint32(m[0:], 15) // map_type BPF_MAP_TYPE_SOCKMAP
	le.PutUint32(m[4:], 4)  // key_size
	le.PutUint32(m[8:], 8)  // value_size: a socket's fd
	le.PutUint32(m[12:], 1) // max_entries
	mapfd := bpf(t, "map create", 0, m)
	rc, err := sock.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var sfd uintptr
	rc.Control(func(fd uintptr) { sfd = fd })
	key, val := new(uint32), new(uint64)
	*val = uint64(sfd)
	pin.Pin(key)
	pin.Pin(val)
	u := make([]byte, 128)
	le.PutUint32(u[0:], uint32(mapfd))
	le.PutUint64(u[8:], uint64(uintptr(unsafe.Pointer(key))))
	le.PutUint64(u[16:], uint64(uintptr(unsafe.Pointer(val))))
	if _, _, errno := unix.Syscall(unix.SYS_BPF, 2, uintptr(unsafe.Pointer(&u[0])), uintptr(len(u))); errno != 0 { // BPF_MAP_UPDATE_ELEM
		t.Fatalf("bpf map update: %v", errno)
	}
	prog := []insn{
		ins(0xbf, 6, 1, 0, 0),            // 0 r6 = r1 (ctx)
		ins(0x61, 2, 1, 60, 0),           // 1 r2 = ctx->local_port
		ins(0x55, 2, 0, 16, int32(port)), // 2 if r2 != port goto 19
		ins(0x61, 2, 1, 12, 0),           // 3 r2 = ctx->protocol
		ins(0x55, 2, 0, 14, 17),          // 4 if r2 != IPPROTO_UDP goto 19
		ins(0x62, 10, 0, -4, 0),          // 5 *(u32 *)(r10-4) = 0 (the key)
		ins(0x18, 1, 1, 0, int32(mapfd)), // 6 r1 = the map (ld_imm64, pseudo map fd)
		ins(0, 0, 0, 0, 0),               // 7
		ins(0xbf, 2, 10, 0, 0),           // 8 r2 = r10
		ins(0x07, 2, 0, 0, -4),           // 9 r2 += -4
		ins(0x85, 0, 0, 0, 1),            // 10 call bpf_map_lookup_elem
		ins(0x15, 0, 0, 7, 0),            // 11 if r0 == NULL goto 19
		ins(0xbf, 7, 0, 0, 0),            // 12 r7 = r0 (the socket)
		ins(0xbf, 1, 6, 0, 0),            // 13 r1 = ctx
		ins(0xbf, 2, 0, 0, 0),            // 14 r2 = the socket
		ins(0xb7, 3, 0, 0, 0),            // 15 r3 = 0 (flags)
		ins(0x85, 0, 0, 0, 124),          // 16 call bpf_sk_assign
		ins(0xbf, 1, 7, 0, 0),            // 17 r1 = the socket
		ins(0x85, 0, 0, 0, 86),           // 18 call bpf_sk_release
		ins(0xb7, 0, 0, 0, 1),            // 19 r0 = SK_PASS
		ins(0x95, 0, 0, 0, 0),            // 20 exit
	}
	license := []byte("GPL\x00")
	verifier := make([]byte, 65536)
	pin.Pin(&prog[0])
	pin.Pin(&license[0])
	pin.Pin(&verifier[0])
	p := make([]byte, 128)
	le.PutUint32(p[0:], 30) // prog_type BPF_PROG_TYPE_SK_LOOKUP
	le.PutUint32(p[4:], uint32(len(prog)))
	le.PutUint64(p[8:], uint64(uintptr(unsafe.Pointer(&prog[0]))))
	le.PutUint64(p[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	le.PutUint32(p[24:], 1) // log_level
	le.PutUint32(p[28:], uint32(len(verifier)))
	le.PutUint64(p[32:], uint64(uintptr(unsafe.Pointer(&verifier[0]))))
	le.PutUint32(p[68:], 36)                                                                      // expected_attach_type BPF_SK_LOOKUP
	r, _, errno := unix.Syscall(unix.SYS_BPF, 5, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p))) // BPF_PROG_LOAD
	if errno != 0 {
		t.Fatalf("bpf prog load: %v\n%s", errno, verifier)
	}
	progfd := int(r)
	t.Cleanup(func() { unix.Close(progfd) })
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	l := make([]byte, 128)
	le.PutUint32(l[0:], uint32(progfd))
	le.PutUint32(l[4:], uint32(ns.Fd()))
	le.PutUint32(l[8:], 36) // attach_type BPF_SK_LOOKUP
	bpf(t, "link create", 28, l)
}

// TestSourceAddressBoundListenerSteered: an answer leaves from the address the client asked, as
// miekg/dns sends it, also on a listener bound to one address that the kernel hands queries sent
// to another (an sk_lookup program here; TPROXY likewise), IPv4 and IPv6: every batched answer
// carries the control message (udpanswer.Reply). With it left out on a bound listener (d4a93d5),
// the answer to 192.0.2.53 left from 127.0.0.1, and the one to 2001:db8::53 from ::1.
func TestSourceAddressBoundListenerSteered(t *testing.T) {
	inNetns(t, []string{"ip", "addr", "add", "192.0.2.53/32", "dev", "lo"},
		[]string{"ip", "-6", "addr", "add", "2001:db8::53/128", "dev", "lo", "nodad"})
	reachable(t, "127.0.0.1", "192.0.2.53")
	reachable(t, "::1", "2001:db8::53")
	for _, c := range []struct{ bound, other string }{{"127.0.0.1", "192.0.2.53"}, {"::1", "2001:db8::53"}} {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(c.bound, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		steerUDPPort(t, pc.(*net.UDPConn), port)
		miekgServer(t, pc, "steered "+c.bound, 64, answerA)
		client := newClient(t, c.bound)
		for i, a := range []string{c.other, c.bound, c.other} {
			asked := netip.AddrPortFrom(netip.MustParseAddr(a), uint16(port))
			if _, from := client.exchange(asked, query(t, uint16(i), "a.example.", dns.TypeA, false)); from != asked {
				t.Errorf("asked %s: answered from %s", asked, from)
			}
		}
	}
}
