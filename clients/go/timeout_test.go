package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/clients/go/internal/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// deadlines is a LedgerService that records how long each call's deadline
// left it (0: none), and answers Get only when the call's context ends.
type deadlines struct {
	opledgerv1.UnimplementedLedgerServiceServer

	mu   sync.Mutex
	left []time.Duration
}

func (d *deadlines) record(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var left time.Duration
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	d.left = append(d.left, left)
}

func (d *deadlines) last() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.left[len(d.left)-1]
}

func (d *deadlines) Prepare(ctx context.Context, r *opledgerv1.PrepareRequest) (*opledgerv1.PrepareResponse, error) {
	d.record(ctx)
	return &opledgerv1.PrepareResponse{Operation: &opledgerv1.Operation{Id: "op_1", Tool: r.GetTool()}}, nil
}

func (d *deadlines) Execute(ctx context.Context, r *opledgerv1.ExecuteRequest) (*opledgerv1.ExecuteResponse, error) {
	d.record(ctx)
	return &opledgerv1.ExecuteResponse{Operation: &opledgerv1.Operation{Id: r.GetOperationId()}}, nil
}

// Get hangs, as a server that stopped answering does, until the caller's
// deadline ends the call.
func (d *deadlines) Get(ctx context.Context, _ *opledgerv1.GetRequest) (*opledgerv1.GetResponse, error) {
	d.record(ctx)
	<-ctx.Done()
	return nil, ctx.Err()
}

func startDeadlines(t *testing.T, opts ...client.Option) (*deadlines, *client.Client) {
	t.Helper()
	d, addr := serveDeadlines(t)
	c, err := client.New(addr, "opl_test", append([]client.Option{client.WithPlaintext()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return d, c
}

func serveDeadlines(t *testing.T) (*deadlines, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	d := &deadlines{}
	srv := grpc.NewServer()
	opledgerv1.RegisterLedgerServiceServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return d, lis.Addr().String()
}

// within requires left to lie in (want-slack, want]: the deadline the server
// saw, minus the time the call took to reach it.
func within(t *testing.T, left, want time.Duration) {
	t.Helper()
	require.True(t, left <= want && left > want-5*time.Second, "deadline left %v, want about %v", left, want)
}

// TestEveryAttemptHasADeadline: a call whose context has no deadline still
// carries one (DefaultTimeout, or WithTimeout's), as in the other opledger
// clients; an earlier deadline of the context wins; a call that asks the
// server to wait gets its wait plus a margin; and a server that stops
// answering ends the call with DEADLINE_EXCEEDED instead of hanging it.
func TestEveryAttemptHasADeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	d, c := startDeadlines(t)
	_, err := c.Execute(ctx, "op_1")
	require.NoError(t, err)
	within(t, d.last(), client.DefaultTimeout)
	_, err = c.WithAPIKey("opl_other").Execute(ctx, "op_1")
	require.NoError(t, err)
	within(t, d.last(), client.DefaultTimeout)
	_, err = c.Execute(ctx, "op_1", client.WithWait(45*time.Second))
	require.NoError(t, err)
	within(t, d.last(), 55*time.Second)
	_, err = c.Prepare(ctx, "pay_invoice", nil, "opk1-k", client.WithExecute(45*time.Second))
	require.NoError(t, err)
	within(t, d.last(), 55*time.Second)
	_, err = c.Prepare(ctx, "pay_invoice", nil, "opk1-k")
	require.NoError(t, err)
	within(t, d.last(), client.DefaultTimeout)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = c.Execute(short, "op_1")
	require.NoError(t, err)
	within(t, d.last(), 3*time.Second)

	d, c = startDeadlines(t, client.WithTimeout(0))
	_, err = c.Execute(ctx, "op_1")
	require.NoError(t, err)
	require.Equal(t, time.Duration(0), d.last(), "WithTimeout(0) leaves the call to the context")

	d, addr := serveDeadlines(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	require.NoError(t, err)
	defer conn.Close()
	c, err = client.NewFromConn(conn, "opl_test", client.RetryPolicy{}, client.WithTimeout(7*time.Second))
	require.NoError(t, err)
	_, err = c.Execute(ctx, "op_1")
	require.NoError(t, err)
	within(t, d.last(), 7*time.Second)

	_, c = startDeadlines(t, client.WithTimeout(300*time.Millisecond))
	_, err = c.Get(ctx, "op_1")
	var e *client.Error
	require.True(t, errors.As(err, &e), "got %v", err)
	require.Equal(t, codes.DeadlineExceeded, e.Code, "a server that stops answering ends the call")
}
