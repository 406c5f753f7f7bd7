package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// ErrExited is what WaitServing returns when the server's process exited
// before it served.
var ErrExited = errors.New("server: exited before it served")

// ErrNotServing is what WaitServing returns when the timeout passed first.
var ErrNotServing = errors.New("server: not serving within the timeout")

// WaitServing polls conn's gRPC health check every 50 ms until it answers
// SERVING, exited is closed (ErrExited), ctx ends, or timeout passes
// (ErrNotServing). The tests, the chaos suite and the benchmark all start
// `opledger serve` processes and wait for them this way.
func WaitServing(ctx context.Context, conn grpc.ClientConnInterface, exited <-chan struct{}, timeout time.Duration) error {
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ErrNotServing
}
