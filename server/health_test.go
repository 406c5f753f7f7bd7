package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/opledger/opledger/proof/grpctest"
	"github.com/opledger/opledger/server"
)

// TestWaitServing: it returns once health answers SERVING, ErrExited when
// the process is gone first, and ErrNotServing after the timeout.
func TestWaitServing(t *testing.T) {
	t.Parallel()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	conn := grpctest.Dial(t, srv)
	ctx := context.Background()

	require.ErrorIs(t, server.WaitServing(ctx, conn, nil, 200*time.Millisecond), server.ErrNotServing)
	exited := make(chan struct{})
	close(exited)
	require.ErrorIs(t, server.WaitServing(ctx, conn, exited, time.Minute), server.ErrExited)

	go func() {
		time.Sleep(100 * time.Millisecond)
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}()
	require.NoError(t, server.WaitServing(ctx, conn, nil, time.Minute))
}
