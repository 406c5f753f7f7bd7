package interceptors

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/internal/metrics"
)

// headerStream is the part of a server stream the chain's links use.
type headerStream struct{ method string }

func (s headerStream) Method() string             { return s.method }
func (headerStream) SetHeader(metadata.MD) error  { return nil }
func (headerStream) SendHeader(metadata.MD) error { return nil }
func (headerStream) SetTrailer(metadata.MD) error { return nil }

// BenchmarkChain measures what the chain costs a unary call in itself,
// without a transport: each link in order, as the server runs them. Its
// "provider" variant records metrics with go-grpc-middleware's Prometheus
// interceptor instead of metrics.GRPC, the baseline GRPC replaced.
func BenchmarkChain(b *testing.B) {
	b.Run("chain", func(b *testing.B) { benchmarkChain(b, false) })
	b.Run("provider", func(b *testing.B) { benchmarkChain(b, true) })
}

func benchmarkChain(b *testing.B, provider bool) {
	const method = "/grpc.testing.TestService/EmptyCall"
	cfg := Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Authenticator: allow{},
		Roles:       map[string][]string{method: {"agent"}},
		Metrics:     metrics.New(nil).GRPC,
		MaxDeadline: 2 * time.Minute}
	links := chain(cfg)
	if provider {
		for i := range links {
			if links[i].name == "metrics" {
				links[i].unary = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()).UnaryServerInterceptor()
			}
		}
	}
	handler := func(context.Context, any) (any, error) { return &testpb.Empty{}, nil }
	info := &grpc.UnaryServerInfo{FullMethod: method}
	call := handler
	for i := len(links) - 1; i >= 0; i-- {
		next, in := call, links[i].unary
		call = func(ctx context.Context, req any) (any, error) { return in(ctx, req, info, next) }
	}
	base := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer k"))
	base = grpc.NewContextWithServerTransportStream(base, headerStream{method})
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancel(base)
		if _, err := call(ctx, &testpb.Empty{}); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
}

// BenchmarkBodyTap measures what the bound on a request message's arrival
// costs a call: the tap's timer and context, and stopping it in the
// deadline link, against the context a call has without it.
func BenchmarkBodyTap(b *testing.B) {
	tap := bodyTap(30 * time.Second)
	base := metadata.NewIncomingContext(context.Background(), metadata.MD{})
	b.ReportAllocs()
	for b.Loop() {
		ctx, _ := tap(base, nil)
		bodyReceived(ctx)
	}
}
