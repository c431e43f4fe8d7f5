package coretest

import (
	"net"
	"testing"
)

// FreePort returns a port free for both UDP and TCP on 127.0.0.1, for Corefiles whose server
// blocks share one port (views, an FQDN target resolved through the same server).
func FreePort(tb testing.TB) string {
	tb.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		pc.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
	tb.Fatal("no port free for UDP and TCP on 127.0.0.1")
	return ""
}
