package bench

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/metrics"
	"github.com/opledger/opledger/server"
	"github.com/opledger/opledger/store"
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

// startStack starts the in-process server; finishedCache is the ledger's
// FinishedCacheSize (0: its default, negative: off).
func startStack(ctx context.Context, dbURL string, toolsYAML []byte, secretHex string, maxConns, finishedCache int, logPath string) (*stack, error) {
	logger, closeLog, err := serveLogger(logPath)
	if err != nil {
		return nil, err
	}
	listener := store.NewListener(dbURL, logger)
	st, l, err := newLedger(ctx, dbURL, toolsYAML, secretHex, maxConns, finishedCache, "bench-inprocess", listener, logger)
	if err != nil {
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

const connsPerServer = 8

func dialClients(addrs []string, apiKey string) (*clients, error) {
	c := &clients{auth: metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+apiKey)),
		servers: len(addrs)}
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
