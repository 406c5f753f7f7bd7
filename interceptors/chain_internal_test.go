package interceptors

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/internal/reason"
	"github.com/opledger/opledger/proof/grpctest"
)

type echo struct {
	testpb.UnimplementedTestServiceServer
}

func (echo) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

type allow struct{}

func (allow) Authenticate(context.Context, string) (Principal, error) {
	return Principal{ID: "pr_1", Tenant: "acme", Roles: []string{"agent"}}, nil
}

// TestRecoveryIsOutermost puts a panicking link right after each link of
// the chain in turn: wherever the panic starts, the call answers INTERNAL
// with reason INTERNAL, and the server keeps serving. A chain whose recovery
// is not outermost fails for the panics outside it.
func TestRecoveryIsOutermost(t *testing.T) {
	t.Parallel()
	cfg := Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Authenticator: allow{},
		Roles: map[string][]string{"/grpc.testing.TestService/EmptyCall": {"agent"}}}
	links := chain(cfg)
	for i := range links {
		t.Run("after "+links[i].name, func(t *testing.T) {
			t.Parallel()
			boom := link{"boom",
				func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("boom")) > 0 {
						panic("boom")
					}
					return h(ctx, req)
				},
				func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
					return h(srv, ss)
				}}
			withBoom := append(append(append([]link(nil), links[:i+1]...), boom), links[i+1:]...)
			srv := grpc.NewServer(options(withBoom)...)
			testpb.RegisterTestServiceServer(srv, echo{})
			conn := grpctest.Dial(t, srv)
			client := testpb.NewTestServiceClient(conn)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer k")

			_, err := client.EmptyCall(metadata.AppendToOutgoingContext(ctx, "boom", "1"), &testpb.Empty{})
			require.Equal(t, codes.Internal, status.Code(err), "%v", err)
			require.Equal(t, "INTERNAL", reason.Of(err))
			_, err = client.EmptyCall(ctx, &testpb.Empty{})
			require.NoError(t, err, "the server survived")
		})
	}
}
