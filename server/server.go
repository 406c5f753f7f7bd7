// Package server is opledger's gRPC edge: it registers LedgerService, health
// and reflection, assembles the interceptor chain, translates requests into
// ledger calls and ledger errors into gRPC statuses.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/durationpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/internal/metrics"
	"github.com/opledger/opledger/internal/reason"
	"github.com/opledger/opledger/tool"
)

// MaxMessageBytes bounds every request and response on the wire. Args have
// a tighter, reasoned limit of their own (ledger.Config.MaxArgsBytes).
const MaxMessageBytes = 1 << 20

// MaxAnswerBytes is the largest answer every client receives: gRPC's
// default receive limit (4 MiB) in grpc-go, grpc-java, Python's and
// Node's clients. Every stored value is bounded (args at Prepare, what
// comes from outside by executor.Bound), so one operation is at most about
// 1.2 MiB as served; a ListOperations page is cut to MaxPageBytes.
const MaxAnswerBytes = 4 << 20

// MaxPageBytes bounds the operations of one ListOperations answer: a page
// whose operations would be more is answered shorter, with a
// next_page_token, whatever page_size asked for. The rest of MaxAnswerBytes
// is room for the token (at most 256 bytes) and the framing.
const MaxPageBytes = MaxAnswerBytes - 4<<10

// Options configures the gRPC server.
type Options struct {
	// Reflection serves grpc.reflection so grpcurl works without protos.
	Reflection bool
	// Logger receives structured logs.
	Logger *slog.Logger
	// Metrics, if set, records gRPC server metrics.
	Metrics *metrics.Metrics
	// TLS, if set, serves gRPC over TLS (with client certificates required
	// when its ClientAuth says so); nil serves plaintext.
	TLS *tls.Config
	// RateLimit bounds each tenant's request rate in this process.
	RateLimit interceptors.RateLimit
	// MaxDeadline caps every call's deadline (default DefaultMaxDeadline).
	MaxDeadline time.Duration
	// Retention is advertised to callers in the opledger-retention response
	// header: how long finished operations (and so their keys) are kept.
	Retention time.Duration
	// Tracing turns on OpenTelemetry spans per call (to the global tracer
	// provider). Off, the stats handler is not installed at all: even a
	// no-op provider costs on every call.
	Tracing bool
	// HeaderTimeout bounds a connection's setup (the TLS handshake and
	// HTTP/2's preface and settings; grpc.ConnectionTimeout), and
	// BodyTimeout a call's request message, from the call's headers
	// (interceptors.Config.BodyTimeout); zero leaves each to grpc-go
	// (120 s, and none).
	HeaderTimeout, BodyTimeout time.Duration
}

// Server serves LedgerService over gRPC.
type Server struct {
	opledgerv1.UnimplementedLedgerServiceServer
	ledger *ledger.Ledger
	logger *slog.Logger
	grpc   *grpc.Server
	health *health.Server
	// retentionHeader advertises Options.Retention in response headers,
	// built once (nil when there is none).
	retentionHeader metadata.MD
	// tools is ListTools' answer, built once.
	toolsOnce sync.Once
	tools     *opledgerv1.ListToolsResponse
}

// Method names, as interceptors see them.
const (
	MethodPrepare        = "/opledger.v1.LedgerService/Prepare"
	MethodApprove        = "/opledger.v1.LedgerService/Approve"
	MethodExecute        = "/opledger.v1.LedgerService/Execute"
	MethodGet            = "/opledger.v1.LedgerService/Get"
	MethodReconcile      = "/opledger.v1.LedgerService/Reconcile"
	MethodCancel         = "/opledger.v1.LedgerService/Cancel"
	MethodListTools      = "/opledger.v1.LedgerService/ListTools"
	MethodListOperations = "/opledger.v1.LedgerService/ListOperations"
)

// Roles says which roles may call each method; everything else is refused.
var Roles = map[string][]string{
	MethodPrepare:        {ledger.RoleAgent},
	MethodApprove:        {ledger.RoleApprover},
	MethodExecute:        {ledger.RoleAgent},
	MethodGet:            {ledger.RoleAgent, ledger.RoleApprover, ledger.RoleOperator},
	MethodReconcile:      {ledger.RoleAgent, ledger.RoleOperator},
	MethodCancel:         {ledger.RoleAgent, ledger.RoleOperator},
	MethodListTools:      {ledger.RoleAgent, ledger.RoleApprover, ledger.RoleOperator},
	MethodListOperations: {ledger.RoleAgent, ledger.RoleApprover, ledger.RoleOperator},
}

// TransportOptions are the grpc.ServerOptions New adds to the interceptor
// chain: message limits, keepalive, stream workers and flow control. The benchmark's
// chain floor uses them too, so that it measures the server's
// configuration.
func TransportOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxAnswerBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 5 * time.Minute}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Reused worker goroutines keep the stack that the interceptor chain
		// and a handler grew, where a fresh goroutine per call would copy
		// its stack on every call. Calls beyond the workers get goroutines
		// of their own, as without the option; an idle worker costs its
		// stack, a few KiB.
		grpc.NumStreamWorkers(uint32(max(64, 16*runtime.GOMAXPROCS(0)))),
	}, FlowControl()...)
}

// FlowControl fixes HTTP/2's flow-control windows at the largest message's
// size, so that a message never waits for a window update. A window set
// this way also turns off grpc-go's bandwidth-delay estimation, which
// otherwise sends the peer a PING whenever data arrives and no PING is out:
// for small unary calls, nearly a PING and its acknowledgement per call,
// each a write and a read on both sides, for a window that small messages
// never need (docs/performance.md, finding 23). The Go client sets the same
// windows.
func FlowControl() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(MaxMessageBytes),
		grpc.InitialConnWindowSize(MaxMessageBytes),
	}
}

// DefaultMaxDeadline is the cap on a call's deadline when Options leave it
// zero.
const DefaultMaxDeadline = 2 * time.Minute

// New builds the gRPC server around l.
func New(l *ledger.Ledger, opts Options) *Server {
	if opts.MaxDeadline == 0 {
		opts.MaxDeadline = DefaultMaxDeadline
	}
	s := &Server{ledger: l, logger: opts.Logger, health: health.NewServer()}
	if opts.Retention > 0 {
		s.retentionHeader = metadata.MD{RetentionHeader: {opts.Retention.String()}}
	}
	l.SetEncoder(func(op ledger.Operation) any { return operationPB(op) })
	chain := interceptors.Config{
		Logger:        opts.Logger,
		Authenticator: authenticator{l},
		Roles:         Roles,
		KeyRequired:   map[string]bool{MethodPrepare: true},
		Validate:      validate,
		RateLimit:     opts.RateLimit,
		MaxDeadline:   opts.MaxDeadline,
		BodyTimeout:   opts.BodyTimeout,
	}
	if opts.Metrics != nil {
		chain.Metrics = opts.Metrics.GRPC
	}
	sopts := append(interceptors.ServerOptions(chain), TransportOptions()...)
	if opts.TLS != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	if opts.HeaderTimeout > 0 {
		sopts = append(sopts, grpc.ConnectionTimeout(opts.HeaderTimeout))
	}
	if opts.Tracing {
		sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return !interceptors.Public(info.FullMethodName) }))))
	}
	s.grpc = grpc.NewServer(sopts...)
	opledgerv1.RegisterLedgerServiceServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus(opledgerv1.LedgerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if opts.Reflection {
		reflection.Register(s.grpc)
	}
	if opts.Metrics != nil {
		opts.Metrics.GRPC.InitializeMetrics(s.grpc)
	}
	return s
}

// Serve accepts connections on lis until ctx ends, then stops gracefully:
// health turns NOT_SERVING, in-flight calls finish (bounded by drain), and
// Serve returns.
func (s *Server) Serve(ctx context.Context, lis net.Listener, drain time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(drain):
		s.grpc.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// GRPC exposes the underlying server, for tests that register extras.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Authenticator adapts the ledger's key check to the interceptors, for
// anything that assembles the interceptor chain around the ledger (the
// server itself, and the benchmark's chain-only baseline).
func Authenticator(l *ledger.Ledger) interceptors.Authenticator { return authenticator{l} }

type authenticator struct{ l *ledger.Ledger }

func (a authenticator) Authenticate(ctx context.Context, key string) (interceptors.Principal, error) {
	act, err := a.l.Authenticate(ctx, key)
	if errors.Is(err, ledger.ErrBadKey) {
		return interceptors.Principal{}, interceptors.ErrBadCredentials
	}
	if err != nil {
		return interceptors.Principal{}, err
	}
	return interceptors.Principal{ID: act.ID, Tenant: act.Tenant, Name: act.Name, Roles: act.Roles}, nil
}

func actorOf(ctx context.Context) ledger.Actor {
	p, _ := interceptors.PrincipalFrom(ctx)
	return ledger.Actor{ID: p.ID, Tenant: p.Tenant, Name: p.Name, Roles: p.Roles}
}

var fingerprintRE = regexp.MustCompile(`^v[0-9]+:[0-9a-f]{64}$`)

func invalid(field, msg string) error {
	return reason.Status(opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, field+": "+msg, nil,
		reason.FieldViolation(field, msg))
}

// validate checks request shape before any handler runs. An operation id
// that cannot exist is NOT_FOUND, like any other id the caller cannot see.
func validate(_ context.Context, _ string, req any) error {
	checkID := func(id string) error {
		if id == "" {
			return invalid("operation_id", "is required")
		}
		if !ledger.ValidOperationID(id) {
			return reason.Status(opledgerv1.ErrorReason_ERROR_REASON_OPERATION_NOT_FOUND,
				fmt.Sprintf("no operation %q in your tenant", truncate(id, 64)), nil)
		}
		return nil
	}
	switch r := req.(type) {
	case *opledgerv1.PrepareRequest:
		if !tool.ValidName(r.GetTool()) {
			return invalid("tool", "must match [a-z][a-z0-9_]{0,63}")
		}
		if len(r.GetToolVersion()) > 32 {
			return invalid("tool_version", "is longer than 32 characters")
		}
		if err := checkWait(r.GetWait()); err != nil {
			return err
		}
	case *opledgerv1.ApproveRequest:
		if err := checkID(r.GetOperationId()); err != nil {
			return err
		}
		if !fingerprintRE.MatchString(r.GetFingerprint()) {
			return invalid("fingerprint", "must be the operation's fingerprint as shown to the approver, e.g. v1:<64 hex digits>")
		}
		if r.GetDecision() == opledgerv1.Decision_DECISION_UNSPECIFIED {
			return invalid("decision", "must be DECISION_APPROVE or DECISION_DENY")
		}
	case *opledgerv1.ExecuteRequest:
		if err := checkID(r.GetOperationId()); err != nil {
			return err
		}
		if err := checkWait(r.GetWait()); err != nil {
			return err
		}
	case *opledgerv1.GetRequest:
		return checkID(r.GetOperationId())
	case *opledgerv1.CancelRequest:
		if err := checkID(r.GetOperationId()); err != nil {
			return err
		}
	case *opledgerv1.ReconcileRequest:
		if err := checkID(r.GetOperationId()); err != nil {
			return err
		}
	case *opledgerv1.ListOperationsRequest:
		for _, st := range r.GetStates() {
			if _, known := opledgerv1.State_name[int32(st)]; !known || st == opledgerv1.State_STATE_UNSPECIFIED {
				return invalid("states", "must list known states, e.g. STATE_AWAITING_APPROVAL")
			}
		}
		if r.GetTool() != "" && !tool.ValidName(r.GetTool()) {
			return invalid("tool", "must be empty or match [a-z][a-z0-9_]{0,63}")
		}
		if r.GetPageSize() < 0 {
			return invalid("page_size", "must not be negative")
		}
		if len(r.GetPageToken()) > 256 {
			return invalid("page_token", "is not a token this server issued")
		}
	}
	return nil
}

func checkWait(w *durationpb.Duration) error {
	if w != nil && (w.CheckValid() != nil || w.AsDuration() < 0) {
		return reason.Status(opledgerv1.ErrorReason_ERROR_REASON_DEADLINE_INVALID,
			"wait must be a non-negative duration", nil, reason.FieldViolation("wait", "must be non-negative"))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
