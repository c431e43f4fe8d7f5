//go:build !linux || 386 || s390x

package udpanswer

// sender sends through the net package on systems other than Linux, and on Linux 386 and s390x
// (sender_raw.go says why).
type sender struct{}

func (*sender) clear() {}

func (*sender) write(d *Direct, b []byte) (int, error) { return d.writeMsgUDP(b) }
