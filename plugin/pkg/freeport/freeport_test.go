package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports On returns are below the ephemeral range, so no socket of the machine bound to
// port 0 or connecting out can take one before the caller binds it; and they are free for both
// UDP and TCP.
func TestOnBelowEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo-span < 1024 {
		t.Fatalf("this machine's ephemeral range starts at %d: no room below it (the test machines' starts at 32768)", lo)
	}
	for range 50 {
		p, err := On("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(p)
		if n < lo-span || n >= lo {
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
