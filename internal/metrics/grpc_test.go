package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/opledger/opledger/proof/grpctest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// testService answers as its requests ask: a status code, a context error
// or a plain error, after the messages asked for.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
}

func errorFor(s *testgrpc.EchoStatus, size int32) error {
	switch {
	case s != nil:
		return status.Error(codes.Code(s.GetCode()), s.GetMessage())
	case size == -1:
		return fmt.Errorf("wrapped: %w", context.DeadlineExceeded)
	case size == -2:
		return errors.New("plain")
	}
	return nil
}

func (testService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

func (testService) UnaryCall(_ context.Context, r *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if err := errorFor(r.GetResponseStatus(), r.GetResponseSize()); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (testService) StreamingOutputCall(r *testgrpc.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	for range r.GetResponseParameters() {
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return errorFor(r.GetResponseStatus(), 0)
}

func (testService) StreamingInputCall(s grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	for {
		if _, err := s.Recv(); err == io.EOF {
			return s.SendAndClose(&testgrpc.StreamingInputCallResponse{})
		} else if err != nil {
			return err
		}
	}
}

func (testService) FullDuplexCall(s grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	for {
		r, err := s.Recv()
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := errorFor(r.GetResponseStatus(), 0); err != nil {
			return err
		}
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// exposition renders what a registry exports, but for the handling times,
// which differ between two clocks: each sample's name, help, type, labels
// and value, and for a histogram its count and its bounds.
func exposition(t *testing.T, r *prometheus.Registry) string {
	t.Helper()
	families, err := r.Gather()
	require.NoError(t, err)
	var lines []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			value := ""
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				value = fmt.Sprint(m.GetCounter().GetValue())
			case dto.MetricType_HISTOGRAM:
				var bounds []string
				for _, b := range m.GetHistogram().GetBucket() {
					bounds = append(bounds, fmt.Sprint(b.GetUpperBound()))
				}
				value = fmt.Sprintf("count=%d bounds=%s", m.GetHistogram().GetSampleCount(), strings.Join(bounds, ","))
			default:
				value = m.String()
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %s  # %s %s", f.GetName(), strings.Join(labels, ","), value, f.GetType(), f.GetHelp()))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestGRPCMatchesProvider serves real calls over TCP through both
// go-grpc-middleware's Prometheus interceptors and GRPC's, each into a
// registry of its own, and requires the two to export the same series with
// the same values: unary and every streaming kind, every way a call ends
// (OK, a status, a wrapped context error, a plain error, Unimplemented, a
// stream failing after messages), and the series InitializeMetrics creates.
func TestGRPCMatchesProvider(t *testing.T) {
	t.Parallel()
	provider := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace(namespace)),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace(namespace),
			grpcprom.WithHistogramBuckets(handlingBuckets)))
	ours := New(nil).GRPC
	theirs, mine := prometheus.NewRegistry(), prometheus.NewRegistry()
	theirs.MustRegister(provider)
	mine.MustRegister(ours)

	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(provider.UnaryServerInterceptor(), ours.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(provider.StreamServerInterceptor(), ours.StreamServerInterceptor()))
	testgrpc.RegisterTestServiceServer(srv, testService{})
	provider.InitializeMetrics(srv)
	ours.InitializeMetrics(srv)
	conn := grpctest.Dial(t, srv)
	c := testgrpc.NewTestServiceClient(conn)
	ctx := t.Context()

	for range 3 {
		_, err := c.EmptyCall(ctx, &testgrpc.Empty{})
		require.NoError(t, err)
	}
	for _, r := range []*testgrpc.SimpleRequest{
		{}, {ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.NotFound)}},
		{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.InvalidArgument)}},
		{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.InvalidArgument)}},
		{ResponseSize: -1}, {ResponseSize: -2},
	} {
		_, _ = c.UnaryCall(ctx, r)
	}
	_, err := c.UnimplementedCall(ctx, &testgrpc.Empty{})
	require.Equal(t, codes.Unimplemented, status.Code(err))

	params := []*testgrpc.ResponseParameters{{}, {}, {}}
	for _, r := range []*testgrpc.StreamingOutputCallRequest{
		{ResponseParameters: params},
		{ResponseParameters: params[:1], ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.Aborted)}},
	} {
		s, err := c.StreamingOutputCall(ctx, r)
		require.NoError(t, err)
		for {
			if _, err := s.Recv(); err != nil {
				break
			}
		}
	}
	in, err := c.StreamingInputCall(ctx)
	require.NoError(t, err)
	for range 4 {
		require.NoError(t, in.Send(&testgrpc.StreamingInputCallRequest{}))
	}
	_, err = in.CloseAndRecv()
	require.NoError(t, err)
	for _, fail := range []bool{false, true} {
		d, err := c.FullDuplexCall(ctx)
		require.NoError(t, err)
		for i := range 2 {
			r := &testgrpc.StreamingOutputCallRequest{}
			if fail && i == 1 {
				r.ResponseStatus = &testgrpc.EchoStatus{Code: int32(codes.FailedPrecondition)}
			}
			require.NoError(t, d.Send(r))
			if _, err := d.Recv(); err != nil {
				break
			}
		}
		_ = d.CloseSend()
		for {
			if _, err := d.Recv(); err != nil {
				break
			}
		}
	}
	// The server counts a call's end after the client has seen it; wait
	// until both sides have counted every call.
	const calls = 3 + 6 + 1 + 2 + 1 + 2
	require.Eventually(t, func() bool {
		return handledTotal(t, theirs) == calls && handledTotal(t, mine) == calls
	}, waitFor, tick)

	want := exposition(t, theirs)
	require.Contains(t, want, `grpc_code=DeadlineExceeded`)
	require.Contains(t, want, `grpc_code=Unknown`)
	require.Contains(t, want, `grpc_type=bidi_stream`)
	require.Equal(t, want, exposition(t, mine))
}

const waitFor, tick = 10 * time.Second, 5 * time.Millisecond

func handledTotal(t *testing.T, r *prometheus.Registry) float64 {
	families, err := r.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() == namespace+"_grpc_server_handled_total" {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
