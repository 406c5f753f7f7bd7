package client_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	client "github.com/opledger/opledger/clients/go"
	"github.com/opledger/opledger/clients/go/internal/require"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// clientPings is a listener whose connections parse what the client sends as
// HTTP/2 frames and count the PINGs the client starts (not its acks).
type clientPings struct {
	net.Listener
	pings atomic.Int32
	wg    sync.WaitGroup
}

func (l *clientPings) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.pings.Add(countPings(pr))
	}()
	return &readTee{Conn: c, w: pw}, nil
}

// clientPreface opens every HTTP/2 connection a client makes.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// countPings reads a client's side of an HTTP/2 connection (RFC 9113: the
// preface, then frames of a 9-byte header: length 24 bits, type, flags,
// stream) and counts the PING frames (type 6) that are not acks (flag 1).
// By hand, so that the client module depends on nothing but grpc.
func countPings(r *io.PipeReader) int32 {
	var n int32
	if _, err := io.ReadFull(r, make([]byte, len(clientPreface))); err != nil {
		_ = r.CloseWithError(err)
		return n
	}
	h := make([]byte, 9)
	for {
		if _, err := io.ReadFull(r, h); err != nil {
			_ = r.CloseWithError(err)
			return n
		}
		if h[3] == 6 && h[4]&1 == 0 {
			n++
		}
		size := int64(h[0])<<16 | int64(h[1])<<8 | int64(h[2])
		if _, err := io.CopyN(io.Discard, r, size); err != nil {
			_ = r.CloseWithError(err)
			return n
		}
	}
}

type readTee struct {
	net.Conn
	w *io.PipeWriter
}

func (c *readTee) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	_, _ = c.w.Write(b[:n])
	return n, err
}

func (c *readTee) Close() error {
	_ = c.w.Close()
	return c.Conn.Close()
}

// pingsOf makes 200 calls with execute and returns how many PINGs the client
// sent the server.
func pingsOf(t *testing.T, execute func(l net.Listener) func() error) int32 {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &clientPings{Listener: lis}
	srv := grpc.NewServer()
	opledgerv1.RegisterLedgerServiceServer(srv, &flaky{})
	go func() { _ = srv.Serve(l) }()
	call := execute(lis)
	for range 200 {
		require.NoError(t, call())
	}
	srv.Stop()
	l.wg.Wait()
	return l.pings.Load()
}

// TestClientSendsNoFlowControlPings checks the windows the client sets: with
// them grpc-go's bandwidth-delay estimation is off and the client pings the
// server on none of its calls; with grpc-go's defaults it pings on most.
func TestClientSendsNoFlowControlPings(t *testing.T) {
	t.Parallel()
	n := pingsOf(t, func(l net.Listener) func() error {
		c, err := client.New(l.Addr().String(), "opl_test", client.WithPlaintext())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return func() error {
			_, err := c.Execute(context.Background(), "op_1")
			return err
		}
	})
	require.Equal(t, int32(0), n)

	n = pingsOf(t, func(l net.Listener) func() error {
		conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		rpc := opledgerv1.NewLedgerServiceClient(conn)
		return func() error {
			_, err := rpc.Execute(context.Background(), &opledgerv1.ExecuteRequest{OperationId: "op_1"})
			return err
		}
	})
	t.Logf("grpc-go's default windows: %d client PINGs in 200 calls", n)
	require.GreaterOrEqual(t, int(n), 20, "the control: grpc-go's default windows ping")
}
