package bench

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/metrics"
	"github.com/opledger/opledger/server"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// stack is opledger wired in this process exactly as `opledger serve` wires
// it (store, listener, ledger with its reconciler, metrics, server), so that
// runtime/pprof can profile it.
type stack struct {
	addr   string
	dir    string
	ledger *ledger.Ledger
	store  *store.Store
	stop   func()
}

func startStack(ctx context.Context, dbURL string, toolsYAML []byte, secretHex string, maxConns int, logPath string) (*stack, error) {
	logger, closeLog, err := serveLogger(logPath)
	if err != nil {
		return nil, err
	}
	secret, err := hex.DecodeString(secretHex)
	if err != nil {
		return nil, err
	}
	reg, err := tool.Parse(toolsYAML, func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, store.Config{URL: dbURL, MaxConns: int32(maxConns)})
	if err != nil {
		return nil, err
	}
	listener := store.NewListener(dbURL, logger)
	l, err := ledger.New(ledger.Config{ServerID: "bench-inprocess", DownstreamSecret: secret}, st, reg,
		executor.NewDefaultRegistry(nil, logger), listener, logger)
	if err != nil {
		st.Close()
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return nil, err
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go listener.Run(bg)
	go l.RunReconciler(bg)
	m := metrics.New(st.OperationCountOpen)
	l.SetObserver(m)
	srv := server.New(l, server.Options{Reflection: true, Logger: logger, Metrics: m})
	done := make(chan struct{})
	go func() { _ = srv.Serve(bg, lis, 5*time.Second); close(done) }()
	return &stack{addr: lis.Addr().String(), dir: filepath.Dir(logPath), ledger: l, store: st, stop: sync.OnceFunc(func() {
		cancel()
		<-done
		st.Close()
		closeLog()
	})}, nil
}

// clients are the connections the load generator spreads its workers over:
// a few per server, as a fleet of agents would have, rather than one
// multiplexed connection for everyone.
type clients struct {
	conns []*grpc.ClientConn
	ledg  []opledgerv1.LedgerServiceClient
	auth  context.Context
}

const connsPerServer = 8

func dialClients(addrs []string, apiKey string) (*clients, error) {
	c := &clients{auth: metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+apiKey))}
	for i := 0; i < connsPerServer; i++ {
		for _, a := range addrs {
			conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				c.close()
				return nil, err
			}
			c.conns = append(c.conns, conn)
			c.ledg = append(c.ledg, opledgerv1.NewLedgerServiceClient(conn))
		}
	}
	return c, nil
}

// client returns worker w's client: workers alternate between servers.
func (c *clients) client(w int) opledgerv1.LedgerServiceClient { return c.ledg[w%len(c.ledg)] }

func (c *clients) close() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

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

// floorServer is a grpc-go server answering canned responses: bare (no
// interceptors) or behind opledger's interceptor chain.
type floorServer struct {
	clients *clients
	stop    func()
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

// startFloor serves the canned answers over TCP loopback. With a stack, the
// server runs opledger's interceptor chain configured as server.New
// configures it (the stack's ledger authenticates, with its cache; a copy of
// the server's request validation; metrics; logs to a file); without, no
// interceptor at all.
func startFloor(c canned, st *stack, apiKey string) (*floorServer, error) {
	var opts []grpc.ServerOption
	stopLog := func() {}
	if st != nil {
		logger, closeLog, err := serveLogger(filepath.Join(st.dir, "chain-floor.log"))
		if err != nil {
			return nil, err
		}
		stopLog = closeLog
		m := metrics.New(nil)
		opts = interceptors.ServerOptions(interceptors.Config{
			Logger:        logger,
			Authenticator: server.Authenticator(st.ledger),
			Roles:         server.Roles,
			KeyRequired:   map[string]bool{server.MethodPrepare: true},
			Validate:      validateLike,
			Metrics:       m.GRPC,
		})
	}
	srv := grpc.NewServer(opts...)
	opledgerv1.RegisterLedgerServiceServer(srv, &cannedLedger{c: c})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopLog()
		return nil, err
	}
	go func() { _ = srv.Serve(lis) }()
	cl, err := dialClients([]string{lis.Addr().String()}, apiKey)
	if err != nil {
		srv.Stop()
		stopLog()
		return nil, err
	}
	return &floorServer{clients: cl, stop: sync.OnceFunc(func() { cl.close(); srv.Stop(); stopLog() })}, nil
}

var operationIDRE = regexp.MustCompile(`^op_[0-9a-z]{26}$`)

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
	if !operationIDRE.MatchString(id) {
		return status.Error(codes.NotFound, "no such operation")
	}
	return nil
}
