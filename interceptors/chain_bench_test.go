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
)

// headerStream is the part of a server stream the chain's links use.
type headerStream struct{ method string }

func (s headerStream) Method() string             { return s.method }
func (headerStream) SetHeader(metadata.MD) error  { return nil }
func (headerStream) SendHeader(metadata.MD) error { return nil }
func (headerStream) SetTrailer(metadata.MD) error { return nil }

// BenchmarkChain measures what the chain costs a unary call in itself,
// without a transport: each link in order, as the server runs them.
func BenchmarkChain(b *testing.B) {
	const method = "/grpc.testing.TestService/EmptyCall"
	cfg := Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Authenticator: allow{},
		Roles:       map[string][]string{method: {"agent"}},
		Metrics:     grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
		MaxDeadline: 2 * time.Minute}
	links := chain(cfg)
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
