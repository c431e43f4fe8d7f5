//go:build !unix

package udpbatch

import (
	"errors"
	"net"
)

// duplicate is not available here: answers are written one by one.
func duplicate(*net.UDPConn) (*net.UDPConn, error) {
	return nil, errors.New("duplicating a socket is not supported on this system")
}
