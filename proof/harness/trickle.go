package harness

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// Trickle is a slow client: it connects to addr over TCP, writes head, then
// one byte of drip after another (cycling through it; none when it is
// empty), one every interval, until the server closes the connection, and
// returns how long that took from the connection. It fails t when the
// server has not closed it within limit: a listener without timeouts keeps
// such a client for ever.
func Trickle(t testing.TB, addr string, head, drip []byte, every, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("trickle: %v", err)
	}
	defer conn.Close()
	closed := make(chan struct{})
	go func() {
		// Whatever the server answers is read and dropped; the
		// connection's end is the condition.
		_, _ = io.Copy(io.Discard, conn)
		close(closed)
	}()
	if _, err := conn.Write(head); err != nil {
		t.Fatalf("trickle: the server refused the request's start: %v", err)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	give := time.NewTimer(limit)
	defer give.Stop()
	sent := len(head)
	for {
		select {
		case <-closed:
			return time.Since(start)
		case <-give.C:
			t.Fatalf("trickle: %s still holds a client that sent %d bytes in %s", addr, sent, limit)
		case <-tick.C:
			if len(drip) == 0 {
				continue
			}
			i := sent - len(head)
			sent++
			if _, err := conn.Write(drip[i%len(drip) : i%len(drip)+1]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				<-closed // the server closed it: the reader sees the end too
				return time.Since(start)
			}
		}
	}
}
