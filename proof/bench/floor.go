package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/internal/metrics"
	"github.com/opledger/opledger/server"
)

// canned is what the floor servers answer: the real server's answers for a
// succeeded operation, so that both floors move the same bytes as opledger.
type canned struct {
	get  *opledgerv1.GetResponse
	exec *opledgerv1.ExecuteResponse
}

func (e *env) cannedResponses(ctx context.Context) (canned, error) {
	cl := e.clients.client(0)
	id := syntheticID(1)
	g, err := cl.Get(e.clients.auth, &opledgerv1.GetRequest{OperationId: id})
	if err != nil {
		return canned{}, err
	}
	x, err := cl.Execute(e.clients.auth, &opledgerv1.ExecuteRequest{OperationId: id})
	if err != nil {
		return canned{}, err
	}
	if !x.GetReplayed() || x.GetOperation().GetState() != opledgerv1.State_STATE_SUCCEEDED {
		return canned{}, errors.New("bench: the synthetic operations do not replay as succeeded")
	}
	return canned{get: g, exec: x}, nil
}

// The files a floor child reads its canned answers from.
const (
	cannedGetFile  = "canned-get.pb"
	cannedExecFile = "canned-execute.pb"
)

func (c canned) write(dir string) error {
	for name, m := range map[string]proto.Message{cannedGetFile: c.get, cannedExecFile: c.exec} {
		b, err := proto.Marshal(m)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func readCanned(dir string) (canned, error) {
	c := canned{get: &opledgerv1.GetResponse{}, exec: &opledgerv1.ExecuteResponse{}}
	for name, m := range map[string]proto.Message{cannedGetFile: c.get, cannedExecFile: c.exec} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return canned{}, err
		}
		if err := proto.Unmarshal(b, m); err != nil {
			return canned{}, fmt.Errorf("bench: %s: %w", name, err)
		}
	}
	for _, op := range []*opledgerv1.Operation{c.get.GetOperation(), c.exec.GetOperation()} {
		if err := asServed(op); err != nil {
			return canned{}, err
		}
	}
	return c, nil
}

// asServed holds op's args and result as the server does (server/jsonwire.go):
// their wire bytes, as unknown fields that marshalling copies, not Structs it
// walks. The floors then marshal the same bytes as cheaply as the server can.
func asServed(op *opledgerv1.Operation) error {
	m := op.ProtoReflect()
	raw := m.GetUnknown()
	for _, name := range []protoreflect.Name{"args", "result"} {
		f := m.Descriptor().Fields().ByName(name)
		if !m.Has(f) {
			continue
		}
		b, err := proto.Marshal(m.Get(f).Message().Interface())
		if err != nil {
			return err
		}
		raw = protowire.AppendBytes(protowire.AppendTag(raw, f.Number(), protowire.BytesType), b)
		m.Clear(f)
	}
	m.SetUnknown(raw)
	return nil
}

type cannedLedger struct {
	opledgerv1.UnimplementedLedgerServiceServer
	c canned
}

func (l *cannedLedger) Get(context.Context, *opledgerv1.GetRequest) (*opledgerv1.GetResponse, error) {
	return l.c.get, nil
}

func (l *cannedLedger) Execute(context.Context, *opledgerv1.ExecuteRequest) (*opledgerv1.ExecuteResponse, error) {
	return l.c.exec, nil
}

// floorGRPC is a grpc-go server answering canned responses. With a ledger,
// it runs opledger's interceptor chain and transport options as server.New
// configures them (the ledger authenticates, with its cache; a copy of the
// server's request validation; metrics; the deadline cap; logs to logger);
// without, it is a bare grpc.NewServer() with no option but the server's
// flow-control windows (server.FlowControl: a transport setting any gRPC
// server can have, so that the floor stays the best a server can do). Both
// serve health, for the start-up check only.
func floorGRPC(c canned, l *ledger.Ledger, logger *slog.Logger) *grpc.Server {
	opts := server.FlowControl()
	if l != nil {
		m := metrics.New(nil)
		opts = append(interceptors.ServerOptions(interceptors.Config{
			Logger:        logger,
			Authenticator: server.Authenticator(l),
			Roles:         server.Roles,
			KeyRequired:   map[string]bool{server.MethodPrepare: true},
			Validate:      validateLike,
			Metrics:       m.GRPC,
			MaxDeadline:   server.DefaultMaxDeadline,
		}), server.TransportOptions()...)
	}
	srv := grpc.NewServer(opts...)
	opledgerv1.RegisterLedgerServiceServer(srv, &cannedLedger{c: c})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return srv
}

// floorServer is a running floor and the clients that measure it.
type floorServer struct {
	clients *clients
	stop    func()
}

// startFloor serves the canned answers over TCP loopback from this process
// (in-process runs: the floor sits where the server under test sits). With
// a stack, behind the chain; see floorGRPC.
func startFloor(c canned, st *stack, apiKey string, conns int) (*floorServer, error) {
	var l *ledger.Ledger
	stopLog := func() {}
	var logger *slog.Logger
	if st != nil {
		lg, closeLog, err := serveLogger(filepath.Join(st.dir, "chain-floor.log"))
		if err != nil {
			return nil, err
		}
		logger, stopLog, l = lg, closeLog, st.ledger
	}
	srv := floorGRPC(c, l, logger)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopLog()
		return nil, err
	}
	go func() { _ = srv.Serve(lis) }()
	cl, err := dialClients([]string{lis.Addr().String()}, apiKey, conns)
	if err != nil {
		srv.Stop()
		stopLog()
		return nil, err
	}
	return &floorServer{clients: cl, stop: sync.OnceFunc(func() { cl.close(); srv.Stop(); stopLog() })}, nil
}

// startFloorChild serves the canned answers from a child process (this
// binary's hidden `bench-floor` command), the way `opledger serve` children
// serve opledger: a floor in the load generator's own process would be
// spared the second Go runtime and the cross-process wake-ups that every
// opledger call pays. With chain, the child runs the interceptor chain and
// authenticates against the main database.
func (e *env) startFloorChild(ctx context.Context, chain bool) (*floorServer, error) {
	name := "floor-bare"
	if chain {
		name = "floor-chain"
	}
	p, err := e.startChild(ctx, name, []string{
		"DATABASE_URL=" + e.cluster.URL(dbMain),
		"OPLEDGER_TOOLS=" + e.toolsFile,
		"OPLEDGER_DOWNSTREAM_SECRET=" + e.secret,
	}, func(addr string) []string {
		args := []string{"bench-floor", "--listen", addr, "--canned", e.dir}
		if chain {
			args = append(args, "--chain")
		}
		return args
	})
	if err != nil {
		return nil, err
	}
	cl, err := dialClients([]string{p.addr}, e.apiKey, e.opts.GRPCConns)
	if err != nil {
		return nil, err
	}
	cl.pids = []int{p.cmd.Process.Pid}
	return &floorServer{clients: cl, stop: sync.OnceFunc(func() { cl.close(); p.stop() })}, nil
}

// FloorConfig configures ServeFloor, the floor child's side.
type FloorConfig struct {
	// Listen is the address to serve on.
	Listen string
	// CannedDir holds the canned answers the parent wrote.
	CannedDir string
	// Chain runs opledger's interceptor chain; it then authenticates
	// against DatabaseURL with a ledger built from ToolsFile and SecretHex.
	Chain                             bool
	DatabaseURL, ToolsFile, SecretHex string
}

// ServeFloor serves a floor until ctx ends: the body of `opledger
// bench-floor`, which only the benchmark starts.
func ServeFloor(ctx context.Context, cfg FloorConfig) error {
	c, err := readCanned(cfg.CannedDir)
	if err != nil {
		return err
	}
	var l *ledger.Ledger
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if cfg.Chain {
		y, err := os.ReadFile(cfg.ToolsFile)
		if err != nil {
			return err
		}
		svc, err := newService(ctx, cfg.DatabaseURL, y, cfg.SecretHex, 4, 0, "bench-floor", logger)
		if err != nil {
			return err
		}
		defer svc.Close()
		l = svc.Ledger
	}
	srv := floorGRPC(c, l, logger)
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); srv.Stop() }()
	return srv.Serve(lis)
}

// validateLike does what the server's validator does for Get and Execute:
// check the operation id's shape.
func validateLike(_ context.Context, _ string, req any) error {
	var id string
	switch r := req.(type) {
	case *opledgerv1.GetRequest:
		id = r.GetOperationId()
	case *opledgerv1.ExecuteRequest:
		id = r.GetOperationId()
	default:
		return nil
	}
	if !ledger.ValidOperationID(id) {
		return status.Error(codes.NotFound, "no such operation")
	}
	return nil
}
