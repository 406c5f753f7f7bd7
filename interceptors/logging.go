package interceptors

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/reason"
)

// codeLevel is the level of a finished call's line: successes are debug (an
// access log is opt-in), refusals a caller can fix are info, refusals that
// hint at load or configuration are warnings, and server faults errors.
func codeLevel(code codes.Code) slog.Level {
	switch code {
	case codes.OK:
		return slog.LevelDebug
	case codes.Canceled, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.Unauthenticated:
		return slog.LevelInfo
	case codes.DeadlineExceeded, codes.PermissionDenied, codes.ResourceExhausted, codes.FailedPrecondition,
		codes.Aborted, codes.OutOfRange, codes.Unavailable:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// finished logs the call's line when its level is enabled. The error's text
// is left out: messages can quote request values (a schema violation names
// the offending value), and args must never reach the logs; the code and
// the ErrorInfo reason stay.
func finished(ctx context.Context, l *slog.Logger, method, kind string, start time.Time, c *call, err error) {
	code := status.Code(err)
	lvl := codeLevel(code)
	if !l.Enabled(ctx, lvl) {
		return
	}
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	attrs := []any{
		"protocol", "grpc", "grpc.component", "server", "grpc.service", service, "grpc.method", name,
		"grpc.method_type", kind, "grpc.code", code.String(),
		"grpc.time_ms", float64(time.Since(start).Microseconds()) / 1000,
	}
	if c.requestID != "" {
		attrs = append(attrs, "request_id", c.requestID)
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, "peer.address", p.Addr.String())
	}
	if d, ok := ctx.Deadline(); ok {
		attrs = append(attrs, "grpc.request.deadline", d.Format(time.RFC3339Nano))
	}
	if c.authenticated {
		attrs = append(attrs, "tenant", c.principal.Tenant, "principal", c.principal.ID)
	}
	if c.keyDigest != "" {
		attrs = append(attrs, "idempotency_key_digest", c.keyDigest)
	}
	if err != nil {
		attrs = append(attrs, "error_reason", reason.Of(err))
	}
	l.Log(ctx, lvl, "finished call", attrs...)
}

func loggingUnary(l *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		ctx, c := withCall(ctx)
		defer logPanicking(ctx, l, info.FullMethod, "unary", start, c)
		resp, err := handler(ctx, req)
		finished(ctx, l, info.FullMethod, "unary", start, c, err)
		return resp, err
	}
}

func loggingStream(l *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		ctx, c := withCall(ss.Context())
		kind := "server_stream"
		switch {
		case info.IsClientStream && info.IsServerStream:
			kind = "bidi_stream"
		case info.IsClientStream:
			kind = "client_stream"
		}
		if ctx != ss.Context() {
			ss = &wrappedStream{ServerStream: ss, ctx: ctx}
		}
		defer logPanicking(ctx, l, info.FullMethod, kind, start, c)
		err := handler(srv, ss)
		finished(ctx, l, info.FullMethod, kind, start, c, err)
		return err
	}
}

// logPanicking, deferred, records a call whose handler (or an inner link)
// panicked as the INTERNAL answer the recovery link outside will give, and
// lets the panic go on to it.
func logPanicking(ctx context.Context, l *slog.Logger, method, kind string, start time.Time, c *call) {
	if p := recover(); p != nil {
		finished(ctx, l, method, kind, start, c, errPanic())
		panic(p)
	}
}
