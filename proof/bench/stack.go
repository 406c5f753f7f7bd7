package bench

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/server"
	"github.com/opledger/opledger/service"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// stack is opledger wired in this process by service.New, exactly as
// `opledger serve` wires it, so that runtime/pprof can profile it.
type stack struct {
	addr   string
	dir    string
	ledger *ledger.Ledger
	store  *store.Store
	stop   func()
}

// startStack starts the in-process server; finishedCache is the ledger's
// FinishedCacheSize (0: its default, negative: off).
func startStack(ctx context.Context, dbURL string, toolsYAML []byte, secretHex string, maxConns, finishedCache int, logPath string,
	mods ...func(*service.Config)) (*stack, error) {
	logger, closeLog, err := serveLogger(logPath)
	if err != nil {
		return nil, err
	}
	svc, err := newService(ctx, dbURL, toolsYAML, secretHex, maxConns, finishedCache, "bench-inprocess", logger, mods...)
	if err != nil {
		closeLog()
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		closeLog()
		return nil, err
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { _ = svc.Run(bg, lis, nil); close(done) }()
	return &stack{addr: lis.Addr().String(), dir: filepath.Dir(logPath), ledger: svc.Ledger, store: svc.Store, stop: sync.OnceFunc(func() {
		cancel()
		<-done
		closeLog()
	})}, nil
}

// newService wires opledger as serve does, with the benchmark's settings.
func newService(ctx context.Context, dbURL string, toolsYAML []byte, secretHex string, maxConns, finishedCache int,
	serverID string, logger *slog.Logger, mods ...func(*service.Config)) (*service.Service, error) {
	secret, err := hex.DecodeString(secretHex)
	if err != nil {
		return nil, err
	}
	reg, err := tool.Parse(toolsYAML, func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	cfg := service.Config{DatabaseURL: dbURL, DownstreamSecret: secret, Reflection: true, DBMaxConns: maxConns,
		ServerID: serverID, FinishedCache: max(finishedCache, 0), Drain: 5 * time.Second}
	for _, m := range mods {
		m(&cfg)
	}
	o := service.Options{Logger: logger, Tools: reg}
	if finishedCache == 0 {
		o.Ledger = func(c *ledger.Config) { c.FinishedCacheSize = 0 } // the ledger's default
	}
	return service.New(ctx, cfg, o)
}

// clients are the connections the load generator spreads its workers over:
// a few per server, as a fleet of agents would have, rather than one
// multiplexed connection for everyone.
type clients struct {
	conns []*grpc.ClientConn
	ledg  []opledgerv1.LedgerServiceClient
	auth  context.Context
	// servers is how many servers the connections reach; ledg[0..servers)
	// reach each once.
	servers int
	// warmed is set once every replayed operation went through every
	// server (see warmReplays).
	warmed bool
	// pids are the server processes the connections reach, for CPU
	// accounting; none when the server runs in the benchmark's process.
	pids []int
}

func dialClients(addrs []string, apiKey string, connsPerServer int) (*clients, error) {
	c := &clients{auth: metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+apiKey)),
		servers: len(addrs)}
	for i := 0; i < connsPerServer; i++ {
		for _, a := range addrs {
			// The flow-control windows the Go client sets (clients/go).
			conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithInitialWindowSize(server.MaxMessageBytes), grpc.WithInitialConnWindowSize(server.MaxMessageBytes))
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
