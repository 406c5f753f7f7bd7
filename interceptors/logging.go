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

// callLog collects what inner interceptors learn about a call for the one
// line logged when it finishes. It is allocated once per call, with plain
// fields rather than log attributes: nothing is formatted unless the
// line's level is enabled, because an access log built and dropped on
// every successful call would cost more than the rest of the chain. Inner
// interceptors set it before the handler runs, on the call's goroutine.
type callLog struct {
	tenant, principal, keyDigest string
}

type callLogKey struct{}

func callLogFrom(ctx context.Context) *callLog {
	if cl, ok := ctx.Value(callLogKey{}).(*callLog); ok {
		return cl
	}
	return &callLog{}
}

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
func finished(ctx context.Context, l *slog.Logger, method, kind string, start time.Time, cl *callLog, err error) {
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
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		attrs = append(attrs, "request_id", id)
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, "peer.address", p.Addr.String())
	}
	if d, ok := ctx.Deadline(); ok {
		attrs = append(attrs, "grpc.request.deadline", d.Format(time.RFC3339Nano))
	}
	if cl.tenant != "" {
		attrs = append(attrs, "tenant", cl.tenant, "principal", cl.principal)
	}
	if cl.keyDigest != "" {
		attrs = append(attrs, "idempotency_key_digest", cl.keyDigest)
	}
	if err != nil {
		attrs = append(attrs, "error_reason", reason.Of(err))
	}
	l.Log(ctx, lvl, "finished call", attrs...)
}

func loggingUnary(l *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		cl := &callLog{}
		ctx = context.WithValue(ctx, callLogKey{}, cl)
		defer logPanicking(ctx, l, info.FullMethod, "unary", start, cl)
		resp, err := handler(ctx, req)
		finished(ctx, l, info.FullMethod, "unary", start, cl, err)
		return resp, err
	}
}

func loggingStream(l *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		cl := &callLog{}
		ctx := context.WithValue(ss.Context(), callLogKey{}, cl)
		kind := "server_stream"
		switch {
		case info.IsClientStream && info.IsServerStream:
			kind = "bidi_stream"
		case info.IsClientStream:
			kind = "client_stream"
		}
		defer logPanicking(ctx, l, info.FullMethod, kind, start, cl)
		err := handler(srv, &wrappedStream{ServerStream: ss, ctx: ctx})
		finished(ctx, l, info.FullMethod, kind, start, cl, err)
		return err
	}
}

// logPanicking, deferred, records a call whose handler (or an inner link)
// panicked as the INTERNAL answer the recovery link outside will give, and
// lets the panic go on to it.
func logPanicking(ctx context.Context, l *slog.Logger, method, kind string, start time.Time, cl *callLog) {
	if p := recover(); p != nil {
		finished(ctx, l, method, kind, start, cl, errPanic())
		panic(p)
	}
}
