package client_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/clients/go/internal/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// flaky is a LedgerService that fails with the queued errors first and
// records the metadata of every attempt.
type flaky struct {
	opledgerv1.UnimplementedLedgerServiceServer

	mu       sync.Mutex
	failures []error
	keys     []string
	auths    []string
}

func (f *flaky) next(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	md, _ := metadata.FromIncomingContext(ctx)
	f.keys = append(f.keys, first(md.Get("idempotency-key")))
	f.auths = append(f.auths, first(md.Get("authorization")))
	if len(f.failures) == 0 {
		return nil
	}
	err := f.failures[0]
	f.failures = f.failures[1:]
	return err
}

func (f *flaky) attempts() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...), append([]string(nil), f.auths...)
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func (f *flaky) Prepare(ctx context.Context, r *opledgerv1.PrepareRequest) (*opledgerv1.PrepareResponse, error) {
	if err := f.next(ctx); err != nil {
		return nil, err
	}
	return &opledgerv1.PrepareResponse{Operation: &opledgerv1.Operation{Id: "op_1", Tool: r.GetTool()}}, nil
}

func (f *flaky) Execute(ctx context.Context, r *opledgerv1.ExecuteRequest) (*opledgerv1.ExecuteResponse, error) {
	if err := f.next(ctx); err != nil {
		return nil, err
	}
	return &opledgerv1.ExecuteResponse{Operation: &opledgerv1.Operation{Id: r.GetOperationId(), State: opledgerv1.State_STATE_SUCCEEDED}}, nil
}

func opledgerStatus(t *testing.T, code codes.Code, reason client.Reason, retry *time.Duration) error {
	t.Helper()
	st := status.New(code, "test failure")
	info := &errdetails.ErrorInfo{Domain: client.Domain, Reason: string(reason)}
	var err error
	if retry != nil {
		st, err = st.WithDetails(info, &errdetails.RetryInfo{RetryDelay: durationpb.New(*retry)})
	} else {
		st, err = st.WithDetails(info)
	}
	require.NoError(t, err)
	return st.Err()
}

// startFlaky serves f on 127.0.0.1 and returns a client with fast backoff.
func startFlaky(t *testing.T, f *flaky, policy client.RetryPolicy) *client.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	opledgerv1.RegisterLedgerServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c, err := client.New(lis.Addr().String(), "opl_test", client.WithPlaintext(), client.WithRetryPolicy(policy))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var fast = client.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

func TestRetriesUnavailableWithTheSameKey(t *testing.T) {
	t.Parallel()
	f := &flaky{failures: []error{
		opledgerStatus(t, codes.Unavailable, client.ReasonLedgerUnavailable, nil),
		status.Error(codes.Unavailable, "connection reset"), // a transport failure, no ErrorInfo
	}}
	c := startFlaky(t, f, fast)
	resp, err := c.Prepare(context.Background(), "pay_invoice", nil, "opk1-same-key")
	require.NoError(t, err)
	require.Equal(t, "op_1", resp.GetOperation().GetId())
	keys, auths := f.attempts()
	require.Equal(t, []string{"opk1-same-key", "opk1-same-key", "opk1-same-key"}, keys)
	require.Equal(t, []string{"Bearer opl_test", "Bearer opl_test", "Bearer opl_test"}, auths)
}

func TestRetriesUnavailableOnAnyMethod(t *testing.T) {
	t.Parallel()
	f := &flaky{failures: []error{opledgerStatus(t, codes.Unavailable, client.ReasonDownstreamUnavailable, nil)}}
	c := startFlaky(t, f, fast)
	resp, err := c.Execute(context.Background(), "op_1")
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	keys, _ := f.attempts()
	require.Equal(t, []string{"", ""}, keys, "Execute sends no idempotency key")
}

func TestDoesNotRetryInvalidArgument(t *testing.T) {
	t.Parallel()
	f := &flaky{failures: []error{opledgerStatus(t, codes.InvalidArgument, client.ReasonArgsInvalid, nil)}}
	c := startFlaky(t, f, fast)
	_, err := c.Prepare(context.Background(), "pay_invoice", nil, "opk1-k")
	require.ErrorIs(t, err, client.ReasonArgsInvalid)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	keys, _ := f.attempts()
	require.Len(t, keys, 1)
}

func TestRetriesAbortedOnlyWithRetryInfo(t *testing.T) {
	t.Parallel()
	delay := time.Millisecond
	f := &flaky{failures: []error{opledgerStatus(t, codes.Aborted, client.ReasonOperationInProgress, &delay)}}
	c := startFlaky(t, f, fast)
	_, err := c.Prepare(context.Background(), "pay_invoice", nil, "opk1-k")
	require.NoError(t, err)
	keys, _ := f.attempts()
	require.Equal(t, []string{"opk1-k", "opk1-k"}, keys)

	g := &flaky{failures: []error{opledgerStatus(t, codes.Aborted, client.ReasonOperationInProgress, nil)}}
	c = startFlaky(t, g, fast)
	_, err = c.Prepare(context.Background(), "pay_invoice", nil, "opk1-k")
	require.ErrorIs(t, err, client.ReasonOperationInProgress)
	keys, _ = g.attempts()
	require.Len(t, keys, 1)
}

func TestAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	unavailable := opledgerStatus(t, codes.Unavailable, client.ReasonLedgerUnavailable, nil)
	f := &flaky{failures: []error{unavailable, unavailable, unavailable, unavailable, unavailable, unavailable}}
	c := startFlaky(t, f, fast)
	_, err := c.Prepare(context.Background(), "pay_invoice", nil, "opk1-k")
	require.ErrorIs(t, err, client.ReasonLedgerUnavailable)
	keys, _ := f.attempts()
	require.Len(t, keys, 4, "the default budget is 4 attempts")

	g := &flaky{failures: []error{unavailable}}
	c = startFlaky(t, g, client.RetryPolicy{MaxAttempts: 1})
	_, err = c.Prepare(context.Background(), "pay_invoice", nil, "opk1-k")
	require.ErrorIs(t, err, client.ReasonLedgerUnavailable)
	keys, _ = g.attempts()
	require.Len(t, keys, 1)
}

func TestDoesNotSleepPastTheDeadline(t *testing.T) {
	t.Parallel()
	hour := time.Hour
	f := &flaky{failures: []error{opledgerStatus(t, codes.Unavailable, client.ReasonLedgerUnavailable, &hour)}}
	c := startFlaky(t, f, fast)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.Prepare(ctx, "pay_invoice", nil, "opk1-k")
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.True(t, e.HasRetryInfo)
	require.Equal(t, time.Hour, e.RetryDelay)
	keys, _ := f.attempts()
	require.Len(t, keys, 1, "a RetryInfo delay beyond the deadline is not slept")
}

// TestTLSIsTheDefault: without WithPlaintext the client speaks TLS, so a
// plaintext server never sees the call; plaintext and a TLS config exclude
// each other.
func TestTLSIsTheDefault(t *testing.T) {
	t.Parallel()
	f := &flaky{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	opledgerv1.RegisterLedgerServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	c, err := client.New(lis.Addr().String(), "opl_test", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Prepare(ctx, "pay_invoice", nil, "k")
	require.Error(t, err)
	require.Equal(t, codes.Unavailable, status.Code(err))
	keys, _ := f.attempts()
	require.Len(t, keys, 0)

	_, err = client.New(lis.Addr().String(), "opl_test", client.WithPlaintext(), client.WithTLSConfig(&tls.Config{}))
	require.Error(t, err)
}
