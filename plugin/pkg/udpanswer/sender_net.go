//go:build !linux || 386 || s390x

package udpanswer

// sender sends through the net package on systems other than Linux.
type sender struct{}

func (*sender) clear() {}

func (*sender) write(d *Direct, b []byte) (int, error) { return d.writeMsgUDP(b) }
