package server

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// pingCounter is a listener whose connections parse what the server writes
// as HTTP/2 frames and count the PINGs the server starts (not its acks).
type pingCounter struct {
	net.Listener
	pings atomic.Int32
	wg    sync.WaitGroup
}

func (l *pingCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		fr := http2.NewFramer(io.Discard, pr)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				_ = pr.CloseWithError(err)
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				l.pings.Add(1)
			}
		}
	}()
	return &teeConn{Conn: c, w: pw}, nil
}

type teeConn struct {
	net.Conn
	w *io.PipeWriter
}

func (c *teeConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	_, _ = c.w.Write(b[:n])
	return n, err
}

func (c *teeConn) Close() error {
	_ = c.w.Close()
	return c.Conn.Close()
}

// serverPings makes 200 unary calls to a server built with opts and
// returns how many PINGs the server sent.
func serverPings(t *testing.T, opts ...grpc.ServerOption) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pc := &pingCounter{Listener: ln}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(pc) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	hc := healthpb.NewHealthClient(conn)
	for range 200 {
		_, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
	}
	require.NoError(t, conn.Close())
	srv.Stop()
	pc.wg.Wait()
	return pc.pings.Load()
}

// TestFlowControlSendsNoPings checks finding 23: with the server's fixed
// windows, grpc-go's bandwidth-delay estimation is off, and the server pings
// no client on its own; with grpc-go's defaults it pings on most calls.
func TestFlowControlSendsNoPings(t *testing.T) {
	t.Parallel()
	require.Zero(t, serverPings(t, TransportOptions()...))
	n := serverPings(t)
	t.Logf("grpc-go's default windows: %d server PINGs in 200 calls", n)
	require.Greater(t, n, int32(20), "the control: grpc-go's default windows ping")
}
