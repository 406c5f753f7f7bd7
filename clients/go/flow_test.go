package client_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
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
		if _, err := io.ReadFull(pr, make([]byte, len(http2.ClientPreface))); err != nil {
			_ = pr.CloseWithError(err)
			return
		}
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
	return &readTee{Conn: c, w: pw}, nil
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
