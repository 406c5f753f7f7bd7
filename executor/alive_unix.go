//go:build unix

package executor

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// connAlive reports whether a kept-alive connection is still open: nothing to read on it and
// no end of stream, checked by one non-blocking read of its socket. A connection the server
// closed (or wrote to) while it was idle is not reused, because a request written to it would
// be lost ambiguously.
func connAlive(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, err := syscall.Read(int(fd), b[:])
		// EAGAIN: nothing to read and still open. A byte or end of stream (no error) means
		// the server wrote or closed while the connection was idle.
		alive = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && alive
}
