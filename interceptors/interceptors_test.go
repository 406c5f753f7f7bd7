package interceptors_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/internal/reason"
	"github.com/opledger/opledger/proof/grpctest"
)

// requireReason checks that err is a gRPC status with code and exactly one
// ErrorInfo, in opledger's domain, carrying reason.
func requireReason(t testing.TB, err error, code codes.Code, want string) *status.Status {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	require.Equal(t, code, st.Code(), "status: %v", err)
	var infos []*errdetails.ErrorInfo
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			infos = append(infos, info)
		}
	}
	require.Len(t, infos, 1, "want exactly one ErrorInfo in %v", err)
	require.Equal(t, reason.Domain, infos[0].GetDomain())
	require.Equal(t, want, infos[0].GetReason(), "status: %v", err)
	return st
}

func TestNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"recovery", "request_id", "metrics", "logging", "deadline", "auth", "rate_limit", "idempotency", "validation"},
		interceptors.Names(interceptors.Config{}))
}

func TestValidateKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values []string
		reason string // "" means accepted
	}{
		{"one value", []string{"order-42"}, ""},
		{"printable ASCII", []string{"a b~!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"}, ""},
		{"single character", []string{"x"}, ""},
		{"255 bytes", []string{strings.Repeat("k", 255)}, ""},
		{"missing", nil, "IDEMPOTENCY_KEY_MISSING"},
		{"empty", []string{""}, "IDEMPOTENCY_KEY_INVALID"},
		{"256 bytes", []string{strings.Repeat("k", 256)}, "IDEMPOTENCY_KEY_INVALID"},
		{"non-ASCII", []string{"clé"}, "IDEMPOTENCY_KEY_INVALID"},
		{"control character", []string{"a\tb"}, "IDEMPOTENCY_KEY_INVALID"},
		{"DEL", []string{"a\x7fb"}, "IDEMPOTENCY_KEY_INVALID"},
		{"leading space", []string{" a"}, "IDEMPOTENCY_KEY_INVALID"},
		{"trailing space", []string{"a "}, "IDEMPOTENCY_KEY_INVALID"},
		{"repeated", []string{"a", "b"}, "IDEMPOTENCY_KEY_INVALID"},
		{"repeated identical", []string{"a", "a"}, "IDEMPOTENCY_KEY_INVALID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := interceptors.ValidateKey(tc.values)
			if tc.reason == "" {
				require.NoError(t, err)
				require.Equal(t, tc.values[0], got)
				return
			}
			requireReason(t, err, codes.InvalidArgument, tc.reason)
			require.Empty(t, got)
		})
	}
}

func TestKeyDigestHidesKey(t *testing.T) {
	t.Parallel()
	d := interceptors.KeyDigest("order-42")
	require.Len(t, d, 16)
	require.Equal(t, d, interceptors.KeyDigest("order-42"), "stable, so log lines can be correlated")
	require.NotEqual(t, d, interceptors.KeyDigest("order-43"))
	require.NotContains(t, d, "order")
}

func TestPublic(t *testing.T) {
	t.Parallel()
	require.True(t, interceptors.Public("/grpc.health.v1.Health/Check"))
	require.True(t, interceptors.Public("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"))
	require.True(t, interceptors.Public("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"))
	require.False(t, interceptors.Public("/opledger.v1.LedgerService/Get"))
	require.False(t, interceptors.Public("/grpc.health.v1.HealthX/Check"))
	require.False(t, interceptors.Public("grpc.health.v1.Health/Check"))
	require.False(t, interceptors.Public("/grpc.health.v1.Health"))
	require.False(t, interceptors.Public("/x/grpc.health.v1.Health/Check"))
}

// syncBuffer is a log sink many goroutines may write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the JSON log records written so far.
func (b *syncBuffer) records(t testing.TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		out = append(out, rec)
	}
	return out
}

// keys is an Authenticator over a fixed map of API keys.
type keys map[string]interceptors.Principal

func (k keys) Authenticate(_ context.Context, key string) (interceptors.Principal, error) {
	p, ok := k[key]
	if !ok {
		return interceptors.Principal{}, interceptors.ErrBadCredentials
	}
	return p, nil
}

// testService panics in EmptyCall and StreamingOutputCall and reports what
// the chain put in the context in UnaryCall.
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	panic("boom: a bug in a handler")
}

func (testService) StreamingOutputCall(*testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	panic("boom: a bug in a stream handler")
}

func (testService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p, _ := interceptors.PrincipalFrom(ctx)
	idem, _ := interceptors.IdempotencyFrom(ctx)
	return &testpb.SimpleResponse{Username: p.Tenant + "/" + p.ID, OauthScope: idem.Digest}, nil
}

const (
	methodEmpty  = "/grpc.testing.TestService/EmptyCall"
	methodUnary  = "/grpc.testing.TestService/UnaryCall"
	methodStream = "/grpc.testing.TestService/StreamingOutputCall"
)

// startChain serves testService behind the interceptor chain on a real TCP
// port and returns a client and the chain's log sink.
func startChain(t *testing.T) (testpb.TestServiceClient, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg := interceptors.Config{
		Logger:        slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Authenticator: keys{"good-key": {ID: "pr_1", Tenant: "acme", Roles: []string{"agent"}}},
		// CacheableUnaryCall is left out on purpose: unlisted methods are
		// closed.
		Roles: map[string][]string{
			methodEmpty:  {"agent"},
			methodStream: {"agent"},
			methodUnary:  {"agent"},
		},
		KeyRequired: map[string]bool{methodUnary: true},
	}
	srv := grpc.NewServer(interceptors.ServerOptions(cfg)...)
	testpb.RegisterTestServiceServer(srv, testService{})
	conn := grpctest.Dial(t, srv)
	return testpb.NewTestServiceClient(conn), logs
}

func authed(idem string) context.Context {
	md := metadata.Pairs("authorization", "Bearer good-key")
	if idem != "" {
		md.Append("idempotency-key", idem)
	}
	return metadata.NewOutgoingContext(context.Background(), md)
}

// finishedCall returns the logging interceptor's record of method.
func finishedCall(t *testing.T, logs *syncBuffer, method string) map[string]any {
	t.Helper()
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	for _, rec := range logs.records(t) {
		if rec["msg"] == "finished call" && rec["grpc.service"] == service && rec["grpc.method"] == name {
			return rec
		}
	}
	require.FailNow(t, "no finished-call record", "method %s", method)
	return nil
}

// TestPanicBecomesInternal: a panicking handler answers INTERNAL with reason
// INTERNAL (the panic text stays in the logs, not in the answer), the server
// keeps serving, and the logging interceptor records the call as an error.
func TestPanicBecomesInternal(t *testing.T) {
	t.Parallel()
	client, logs := startChain(t)

	_, err := client.EmptyCall(authed(""), &testpb.Empty{})
	st := requireReason(t, err, codes.Internal, "INTERNAL")
	require.NotContains(t, st.Message(), "boom")

	rec := finishedCall(t, logs, methodEmpty)
	require.Equal(t, "ERROR", rec["level"])
	require.Equal(t, "Internal", rec["grpc.code"])
	require.NotEmpty(t, rec["request_id"])
	var panicLogged bool
	for _, r := range logs.records(t) {
		if r["msg"] == "panic in handler" {
			panicLogged = true
			require.Equal(t, "ERROR", r["level"])
			require.Contains(t, r["panic"], "boom")
		}
	}
	require.True(t, panicLogged)

	stream, err := client.StreamingOutputCall(authed(""), &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	requireReason(t, err, codes.Internal, "INTERNAL")
	rec = finishedCall(t, logs, methodStream)
	require.Equal(t, "ERROR", rec["level"])

	// The process survived the panics.
	resp, err := client.UnaryCall(authed("order-42"), &testpb.SimpleRequest{})
	require.NoError(t, err)
	require.Equal(t, "acme/pr_1", resp.GetUsername())
}

// TestChainAuthAndIdempotency exercises the chain's refusals and what it hands
// to handlers.
func TestChainAuthAndIdempotency(t *testing.T) {
	t.Parallel()
	client, logs := startChain(t)

	_, err := client.EmptyCall(context.Background(), &testpb.Empty{})
	requireReason(t, err, codes.Unauthenticated, "API_KEY_MISSING")
	_, err = client.EmptyCall(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope"), &testpb.Empty{})
	requireReason(t, err, codes.Unauthenticated, "API_KEY_INVALID")

	// A method nobody listed in Roles is closed.
	_, err = client.CacheableUnaryCall(authed(""), &testpb.SimpleRequest{})
	st := requireReason(t, err, codes.PermissionDenied, "ROLE_REQUIRED")
	require.Equal(t, "CacheableUnaryCall is not open to any role", st.Message())

	_, err = client.UnaryCall(authed(""), &testpb.SimpleRequest{})
	requireReason(t, err, codes.InvalidArgument, "IDEMPOTENCY_KEY_MISSING")
	// A key is validated even where it is optional.
	_, err = client.EmptyCall(authed(strings.Repeat("k", 256)), &testpb.Empty{})
	requireReason(t, err, codes.InvalidArgument, "IDEMPOTENCY_KEY_INVALID")

	var header metadata.MD
	resp, err := client.UnaryCall(authed("order-42"), &testpb.SimpleRequest{}, grpc.Header(&header))
	require.NoError(t, err)
	require.Equal(t, interceptors.KeyDigest("order-42"), resp.GetOauthScope())
	require.Len(t, header.Get(interceptors.RequestIDHeader), 1, "every answer carries a request id")
	first := header.Get(interceptors.RequestIDHeader)[0]
	require.Regexp(t, `^[0-9a-f]{24}$`, first)
	_, err = client.UnaryCall(authed("order-42"), &testpb.SimpleRequest{}, grpc.Header(&header))
	require.NoError(t, err)
	require.NotEqual(t, first, header.Get(interceptors.RequestIDHeader)[0], "each call gets an id of its own")

	// A caller's well-formed request id is echoed.
	ctx := metadata.AppendToOutgoingContext(authed("order-43"), interceptors.RequestIDHeader, "req-abc.1")
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header))
	require.NoError(t, err)
	require.Equal(t, []string{"req-abc.1"}, header.Get(interceptors.RequestIDHeader))

	rec := finishedCall(t, logs, methodUnary)
	require.NotContains(t, rec, "idempotency-key")
	for _, r := range logs.records(t) {
		b, _ := json.Marshal(r)
		require.NotContains(t, string(b), "order-42")
		require.NotContains(t, string(b), "good-key")
	}
}

// TestPanicInAnyLinkBecomesInternal (issue 11, defect 7): with recovery
// innermost, a panic in the authenticator or a validator killed the
// process (TestRecoveryIsOutermost puts a panic after every link). Each panics here on a request of its own;
// each answers INTERNAL and the server goes on serving.
func TestPanicInAnyLinkBecomesInternal(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	cfg := interceptors.Config{
		Logger:        slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Authenticator: panickyKeys{"good-key": {ID: "pr_1", Tenant: "acme", Roles: []string{"agent"}}},
		Roles:         map[string][]string{methodUnary: {"agent"}},
		KeyRequired:   map[string]bool{methodUnary: true},
		Validate: func(_ context.Context, _ string, req any) error {
			if req.(*testpb.SimpleRequest).GetFillOauthScope() {
				panic("boom: a bug in a validator")
			}
			return nil
		},
	}
	srv := grpc.NewServer(interceptors.ServerOptions(cfg)...)
	testpb.RegisterTestServiceServer(srv, testService{})
	conn := grpctest.Dial(t, srv)
	client := testpb.NewTestServiceClient(conn)

	panicAuth := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer panic-key", "idempotency-key", "k"))
	for name, call := range map[string]func() error{
		"auth": func() error { _, err := client.UnaryCall(panicAuth, &testpb.SimpleRequest{}); return err },
		"validation": func() error {
			_, err := client.UnaryCall(authed("k2"), &testpb.SimpleRequest{FillOauthScope: true})
			return err
		},
	} {
		st := requireReason(t, call(), codes.Internal, "INTERNAL")
		require.NotContains(t, st.Message(), "boom", name)
	}
	resp, err := client.UnaryCall(authed("k3"), &testpb.SimpleRequest{})
	require.NoError(t, err, "the process survived the panics")
	require.Equal(t, "acme/pr_1", resp.GetUsername())
	panics := 0
	for _, r := range logs.records(t) {
		if r["msg"] == "panic in handler" {
			panics++
			require.NotEmpty(t, r["request_id"])
		}
	}
	require.Equal(t, 2, panics)
}

// panickyKeys is an Authenticator with a bug: one key makes it panic.
type panickyKeys keys

func (k panickyKeys) Authenticate(ctx context.Context, key string) (interceptors.Principal, error) {
	if key == "panic-key" {
		panic("boom: a bug in the authenticator")
	}
	return keys(k).Authenticate(ctx, key)
}

// TestFinishedLineNamesTheCall: what the links inside the logging link
// learn of a call (its request id, its caller, its idempotency key's digest)
// reaches the line logged when it finishes, and a panic's line carries the
// same request id as the call's, for unary and streaming calls alike.
func TestFinishedLineNamesTheCall(t *testing.T) {
	t.Parallel()
	client, logs := startChain(t)

	ctx := metadata.AppendToOutgoingContext(authed("order-44"), interceptors.RequestIDHeader, "req-named.1")
	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
	require.NoError(t, err)
	require.Equal(t, "acme/pr_1", resp.GetUsername(), "the handler sees the caller")
	rec := finishedCall(t, logs, methodUnary)
	require.Equal(t, "req-named.1", rec["request_id"])
	require.Equal(t, "acme", rec["tenant"])
	require.Equal(t, "pr_1", rec["principal"])
	require.Equal(t, interceptors.KeyDigest("order-44"), rec["idempotency_key_digest"])

	ctx = metadata.AppendToOutgoingContext(authed(""), interceptors.RequestIDHeader, "req-stream.1")
	stream, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	requireReason(t, err, codes.Internal, "INTERNAL")
	rec = finishedCall(t, logs, methodStream)
	require.Equal(t, "req-stream.1", rec["request_id"])
	require.Equal(t, "acme", rec["tenant"])
	require.Equal(t, "pr_1", rec["principal"])
	var panicID any
	for _, r := range logs.records(t) {
		if r["msg"] == "panic in handler" && r["grpc.method"] == methodStream {
			panicID = r["request_id"]
		}
	}
	require.Equal(t, "req-stream.1", panicID, "the panic's line names the call")
}
