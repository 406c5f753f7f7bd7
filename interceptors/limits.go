package interceptors

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/reason"
)

// RateLimit bounds each tenant's request rate in this process. Limits are
// per replica: with R replicas a tenant may reach R times the rate, which is
// the price of keeping the hot path off the database.
type RateLimit struct {
	// PerSecond is the sustained rate; 0 disables limiting.
	PerSecond float64
	// Burst is the bucket size; 0 means PerSecond (at least 1).
	Burst int
}

type tenantLimiter struct {
	cfg RateLimit
	mu  sync.Mutex
	m   map[string]*rate.Limiter
}

func (t *tenantLimiter) allow(tenant string) (time.Duration, bool) {
	t.mu.Lock()
	l := t.m[tenant]
	if l == nil {
		if len(t.m) > 100000 {
			t.m = map[string]*rate.Limiter{}
		}
		burst := t.cfg.Burst
		if burst <= 0 {
			burst = max(1, int(t.cfg.PerSecond))
		}
		l = rate.NewLimiter(rate.Limit(t.cfg.PerSecond), burst)
		t.m[tenant] = l
	}
	t.mu.Unlock()
	r := l.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return d, false
	}
	return 0, true
}

func rateLimited(delay time.Duration) error {
	return reason.Status(opledgerv1.ErrorReason_ERROR_REASON_RATE_LIMITED,
		"too many requests for this tenant; retry after the RetryInfo delay", nil,
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

func rateLimitUnary(cfg RateLimit) grpc.UnaryServerInterceptor {
	if cfg.PerSecond <= 0 {
		return passUnary
	}
	t := &tenantLimiter{cfg: cfg, m: map[string]*rate.Limiter{}}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if p, ok := PrincipalFrom(ctx); ok {
			if d, ok := t.allow(p.Tenant); !ok {
				return nil, rateLimited(d)
			}
		}
		return handler(ctx, req)
	}
}

func rateLimitStream(cfg RateLimit) grpc.StreamServerInterceptor {
	if cfg.PerSecond <= 0 {
		return passStream
	}
	t := &tenantLimiter{cfg: cfg, m: map[string]*rate.Limiter{}}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if p, ok := PrincipalFrom(ss.Context()); ok {
			if d, ok := t.allow(p.Tenant); !ok {
				return rateLimited(d)
			}
		}
		return handler(srv, ss)
	}
}

// deadlineUnary caps how long any call may run, whatever deadline the
// client sent (or none): a call cannot hold server resources forever. It
// also ends the bound on the call's request message (bodyTap): a unary
// call's links run once its message has arrived.
func deadlineUnary(maxDur time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		bodyReceived(ctx)
		if maxDur <= 0 {
			return handler(ctx, req)
		}
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > maxDur {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, maxDur)
			defer cancel()
		}
		return handler(ctx, req)
	}
}

// deadlineStream leaves streams' run alone: health Watch and reflection
// streams are long-lived by design. Only their first request message is
// bounded (bodyTap), until it has arrived.
func deadlineStream(time.Duration) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if _, ok := ss.Context().Value(bodyTimerKey{}).(*time.Timer); !ok {
			return handler(srv, ss)
		}
		return handler(srv, &firstMessage{ServerStream: ss})
	}
}

// firstMessage ends its stream's body bound once its first message has
// arrived.
type firstMessage struct {
	grpc.ServerStream
	received bool
}

func (s *firstMessage) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if !s.received {
		s.received = true
		bodyReceived(s.Context())
	}
	return err
}

// bodyTimerKey holds a call's body timer in its context.
type bodyTimerKey struct{}

// bodyTap bounds how long a call's request message may take to arrive,
// counted from the call's headers: grpc-go waits for the whole message of a
// unary call before any interceptor runs, and, without a deadline from the
// client, for ever; a client trickling its message would hold the stream
// and what the server allotted it. The timer ends the stream's context
// (the client is answered CANCELLED) unless the deadline link stops it
// first (bodyReceived).
func bodyTap(d time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, _ *tap.Info) (context.Context, error) {
		ctx, cancel := context.WithCancelCause(ctx)
		t := time.AfterFunc(d, func() { cancel(errBodyTimeout) })
		return context.WithValue(ctx, bodyTimerKey{}, t), nil
	}
}

var errBodyTimeout = errors.New("the request message did not arrive within the body timeout")

// bodyReceived stops ctx's body timer, if it has one.
func bodyReceived(ctx context.Context) {
	if t, ok := ctx.Value(bodyTimerKey{}).(*time.Timer); ok {
		t.Stop()
	}
}
