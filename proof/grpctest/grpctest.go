// Package grpctest serves a test's gRPC server over TCP loopback and dials
// it, so that tests of interceptors and handlers go through a real
// transport.
package grpctest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial serves srv on a free 127.0.0.1 port until the test ends and returns
// a plaintext client connection to it, closed when the test ends.
func Dial(t testing.TB, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
