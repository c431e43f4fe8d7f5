package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports On returns are below the ephemeral range (where the range leaves room: 32768 and up
// by default), so no socket of the machine bound to port 0 or connecting out can take one before
// the caller binds it; they are free for both UDP and TCP, and never returned twice.
func TestOnBelowEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	below := lo-span >= 1024 // else On falls back to the kernel's choice
	seen := map[string]bool{}
	for range 50 {
		p, err := On("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %s returned twice", p)
		}
		seen[p] = true
		if n, _ := strconv.Atoi(p); below && (n < lo-span || n >= lo) {
			t.Fatalf("port %d, want one in [%d, %d)", n, lo-span, lo)
		}
		pc, err := net.ListenPacket("udp", "127.0.0.1:"+p)
		if err != nil {
			t.Fatalf("UDP %s: %v", p, err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			pc.Close()
			t.Fatalf("TCP %s: %v", p, err)
		}
		pc.Close()
		l.Close()
	}
}

// A port taken for either transport is not free.
func TestFreeSeesTakenPorts(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_, p, _ := net.SplitHostPort(pc.LocalAddr().String())
	if free("127.0.0.1", p) {
		t.Errorf("UDP port %s taken, reported free", p)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ = net.SplitHostPort(l.Addr().String())
	if free("127.0.0.1", p) {
		t.Errorf("TCP port %s taken, reported free", p)
	}
}
