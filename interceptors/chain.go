// Package interceptors holds opledger's gRPC server middleware: request ids,
// structured logging, authentication and roles, idempotency keys and request
// fingerprints, request validation and panic recovery, assembled in one
// ordered chain that is identical for unary and streaming calls.
package interceptors

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/metrics"
	"github.com/opledger/opledger/internal/reason"
)

// Validator checks a decoded request before the handler sees it and returns
// a status error (built with Status) when it is malformed.
type Validator func(ctx context.Context, method string, req any) error

// Config is everything the chain needs from the server.
type Config struct {
	// Logger receives one JSON line per finished call.
	Logger *slog.Logger
	// Authenticator resolves bearer keys.
	Authenticator Authenticator
	// Roles maps each full method name to the roles allowed to call it.
	// Methods missing here are refused (except health and reflection).
	Roles map[string][]string
	// KeyRequired lists the methods that must carry an idempotency key.
	KeyRequired map[string]bool
	// Validate checks requests; nil accepts everything.
	Validate Validator
	// Metrics records gRPC server metrics; nil records none.
	Metrics *metrics.GRPC
	// RateLimit bounds each tenant's request rate; zero disables it.
	RateLimit RateLimit
	// MaxDeadline caps every unary call's deadline; zero leaves them alone.
	MaxDeadline time.Duration
	// BodyTimeout bounds how long a call's request message may take to
	// arrive from the call's headers (a stream's first message); zero
	// leaves it unbounded.
	BodyTimeout time.Duration
}

// link is one element of the chain in both its forms.
type link struct {
	name   string
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

// chain is the one ordered list of interceptors, outermost first. Recovery
// is outermost, so that a panic anywhere (in a handler or in any link:
// auth, the idempotency check, validation…) becomes an INTERNAL answer and
// never a dead process; logging records a panicking call like any failed
// one on its way out.
func chain(c Config) []link {
	authFn := authFunc(c.Authenticator, c.Roles)
	needsAuth := selector.MatchFunc(func(_ context.Context, m interceptors.CallMeta) bool { return !publicService(m.Service) })
	metricsU, metricsS := passUnary, passStream
	if c.Metrics != nil {
		metricsU, metricsS = c.Metrics.UnaryServerInterceptor(), c.Metrics.StreamServerInterceptor()
	}
	return []link{
		{"recovery", recoverUnary(c.Logger), recoverStream(c.Logger)},
		{"request_id", requestIDUnary, requestIDStream},
		{"metrics", metricsU, metricsS},
		{"logging", loggingUnary(c.Logger), loggingStream(c.Logger)},
		{"deadline", deadlineUnary(c.MaxDeadline), deadlineStream(c.MaxDeadline)},
		{"auth", selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(authFn), needsAuth),
			selector.StreamServerInterceptor(auth.StreamServerInterceptor(authFn), needsAuth)},
		{"rate_limit", rateLimitUnary(c.RateLimit), rateLimitStream(c.RateLimit)},
		{"idempotency", idempotencyUnary(c.KeyRequired), idempotencyStream(c.KeyRequired)},
		{"validation", validateUnary(c.Validate), validateStream(c.Validate)},
	}
}

// Names returns the chain's interceptor names in order, outermost first.
func Names(c Config) []string {
	var out []string
	for _, l := range chain(c) {
		out = append(out, l.name)
	}
	return out
}

// ServerOptions returns the chain as grpc.ServerOptions, the same list for
// unary and streaming calls, the codec that lets the validation link
// refuse a request that does not decode (requestCodec), and the bound on
// a request message's arrival (bodyTap).
func ServerOptions(c Config) []grpc.ServerOption {
	opts := append(options(chain(c)), grpc.ForceServerCodecV2(newRequestCodec()))
	if c.BodyTimeout > 0 {
		// The deadline link ends the bound once the message is in.
		opts = append(opts, grpc.InTapHandle(bodyTap(c.BodyTimeout)))
	}
	return opts
}

func options(links []link) []grpc.ServerOption {
	var u []grpc.UnaryServerInterceptor
	var s []grpc.StreamServerInterceptor
	for _, l := range links {
		u = append(u, l.unary)
		s = append(s, l.stream)
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(u...), grpc.ChainStreamInterceptor(s...)}
}

// Public reports whether a method is served without authentication: only
// gRPC health checking and server reflection.
func Public(fullMethod string) bool {
	service, _, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	return ok && strings.HasPrefix(fullMethod, "/") && publicService(service)
}

// publicService reports whether a service's methods are Public. The auth
// link asks it with the service name it has, so as not to format the full
// method name on every call.
func publicService(service string) bool {
	switch service {
	case "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection":
		return true
	}
	return false
}

// RequestIDHeader carries the request id in both directions.
const RequestIDHeader = "x-request-id"

// requestID takes the caller's request id, when it sent a well-formed one,
// or makes one; echoes it in the response header; and records it in the
// call's state for the log lines.
func requestID(ctx context.Context) (context.Context, string) {
	id := ""
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDHeader); len(v) == 1 && len(v[0]) <= 64 && isToken(v[0]) {
		id = v[0]
	} else {
		var b [12]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	_ = grpc.SetHeader(ctx, metadata.MD{RequestIDHeader: {id}}) // the name is lower case already: no Pairs
	ctx, c := withCall(ctx)
	c.requestID = id
	return ctx, id
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func requestIDUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, _ = requestID(ctx)
	return handler(ctx, req)
}

func requestIDStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if ctx, _ := requestID(ss.Context()); ctx != ss.Context() {
		ss = &wrappedStream{ServerStream: ss, ctx: ctx}
	}
	return handler(srv, ss)
}

type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *wrappedStream) Context() context.Context { return w.ctx }

// call is what the chain's links learn of one call: the recovery link,
// outermost, puts it in the call's context, and the links inside fill it in
// (the request id, the caller, the idempotency key's digest) for the log
// lines and the handler, rather than each wrapping the context in a value
// of its own: every wrap is an allocation, and every later ctx.Value walks
// past it. Its fields are plain values, not log attributes: nothing is
// formatted unless the finished call's line is enabled, because an access
// log built and dropped on every successful call would cost more than the
// rest of the chain. The links set it before the handler runs, on the
// call's goroutine; the handler only reads it.
type call struct {
	requestID     string
	keyDigest     string
	principal     Principal
	authenticated bool
}

type callKey struct{}

// callFrom returns the call's state, or nil outside the chain.
func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// withCall returns ctx with a call state, the one it carries if any.
func withCall(ctx context.Context) (context.Context, *call) {
	if c := callFrom(ctx); c != nil {
		return ctx, c
	}
	c := &call{}
	return context.WithValue(ctx, callKey{}, c), c
}

// errPanic is the answer to a call that panicked: the panic's text stays in
// the logs.
func errPanic() error {
	return reason.Status(opledgerv1.ErrorReason_ERROR_REASON_INTERNAL, "internal error", nil)
}

func logPanic(ctx context.Context, l *slog.Logger, method string, c *call, p any) {
	l.ErrorContext(ctx, "panic in handler", "grpc.method", method, "request_id", c.requestID,
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
}

func recoverUnary(l *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		ctx, c := withCall(ctx)
		defer func() {
			if p := recover(); p != nil {
				logPanic(ctx, l, info.FullMethod, c, p)
				resp, err = nil, errPanic()
			}
		}()
		return handler(ctx, req)
	}
}

func recoverStream(l *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx, c := withCall(ss.Context())
		defer func() {
			if p := recover(); p != nil {
				logPanic(ctx, l, info.FullMethod, c, p)
				err = errPanic()
			}
		}()
		return handler(srv, &wrappedStream{ServerStream: ss, ctx: ctx})
	}
}

func passUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(ctx, req)
}

func passStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, ss)
}

func validateUnary(v Validator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := undecodable(req); err != nil {
			return nil, err
		}
		if v != nil {
			if err := v(ctx, info.FullMethod, req); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

func validateStream(v Validator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &validatingStream{ServerStream: ss, v: v, method: info.FullMethod})
	}
}

type validatingStream struct {
	grpc.ServerStream
	v      Validator
	method string
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := undecodable(m); err != nil {
		return err
	}
	if s.v == nil {
		return nil
	}
	return s.v(s.Context(), s.method, m)
}
