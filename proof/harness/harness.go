// Package harness runs real opledger servers for tests: a fresh PostgreSQL
// database, the fake processor over real HTTP, in-process servers on real
// TCP listeners, and `opledger serve` processes that can be killed with real
// signals. Only tests import it.
package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/failpoint"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/service"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// Migrate is the pgtest migration hook for opledger's schema.
func Migrate(ctx context.Context, url string) error {
	_, err := store.Migrate(ctx, url)
	return err
}

// Main is the TestMain of packages that use the harness.
func Main(m *testing.M) { pgtest.Main(m, pgtest.Options{Migrate: Migrate}) }

// Env is one test's world: its own database and fake processor.
type Env struct {
	T          testing.TB
	DBURL      string
	Fakepay    *fakepay.Server
	FakepayURL string
	Secret     []byte
	ToolsYAML  []byte
	Store      *store.Store
}

// Options shapes an Env.
type Options struct {
	// ToolsYAML replaces the demo tools file; ${OPLEDGER_FAKEPAY_URL} in it
	// points at this Env's fake processor.
	ToolsYAML []byte
	// DatabaseURL, when set, is a migrated database to use instead of a
	// fresh one of the test cluster (pgtest.NewSkewedDatabase's, or a
	// failover formation's multi-host URL).
	DatabaseURL string
}

// New returns a fresh Env; everything it starts stops at the test's end.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	url := opts.DatabaseURL
	if url == "" {
		url = pgtest.NewDatabase(t)
	}
	fp := fakepay.New(fakepay.Options{})
	hs := httptest.NewServer(fp)
	t.Cleanup(hs.Close)
	st, err := store.Open(context.Background(), store.Config{URL: url, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	y := opts.ToolsYAML
	if y == nil {
		y = examples.ToolsYAML
	}
	return &Env{T: t, DBURL: url, Fakepay: fp, FakepayURL: hs.URL, Secret: []byte("0123456789abcdef-test-secret"), ToolsYAML: y, Store: st}
}

// Getenv is the environment tools files are expanded with.
func (e *Env) Getenv(k string) string {
	if k == "OPLEDGER_FAKEPAY_URL" {
		return e.FakepayURL
	}
	return ""
}

// Tools parses the Env's tools file.
func (e *Env) Tools() *tool.Registry {
	reg, err := tool.Parse(e.ToolsYAML, e.Getenv)
	require.NoError(e.T, err)
	return reg
}

// Key creates a principal with roles in tenant and returns its API key.
func (e *Env) Key(tenant string, roles ...string) string {
	key, _, err := ledger.CreatePrincipal(context.Background(), e.Store, tenant, "", roles)
	require.NoError(e.T, err)
	return key
}

// Server is an in-process opledger server on a real TCP port.
type Server struct {
	Addr   string
	Ledger *ledger.Ledger
	Conn   *grpc.ClientConn
	Client opledgerv1.LedgerServiceClient
	// Store is the server's own pool; closing it takes the database away
	// from this server only.
	Store *store.Store

	stop func()
}

// Stop shuts the server down gracefully, as a restart would, before the
// test ends; it is safe to call more than once.
func (s *Server) Stop() { s.stop() }

// ServerOptions tunes an in-process server.
type ServerOptions struct {
	Ledger ledger.Config
	Hooks  *ledger.Hooks
	// NoReconciler leaves the background reconciler off.
	NoReconciler bool
	// TLS serves gRPC over TLS; the Server's own Client then trusts
	// ClientTLS (nil: no client built-in connection check).
	TLS       *tls.Config
	ClientTLS *tls.Config
	// RateLimit bounds each tenant's request rate.
	RateLimit interceptors.RateLimit
	// Logger receives the server's logs; nil writes WARN and above to
	// stderr. Tests that inspect what is logged pass their own.
	Logger *slog.Logger
	// HTTPClient is the HTTP executors' client; nil gives each executor a
	// private one. Tests that stage transport faults (a refused
	// connection) pass their own.
	HTTPClient *http.Client
	// ToolsYAML, when set, is this server's tools file instead of the
	// Env's: a server restarted with a changed policy while another still
	// runs the old one (a rolling change).
	ToolsYAML []byte
}

// StartServer starts an in-process server against the Env's database,
// wired by service.New as `opledger serve` is.
func (e *Env) StartServer(opts ServerOptions) *Server {
	t := e.T
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg := service.Config{DatabaseURL: e.DBURL, DownstreamSecret: e.Secret, Reflection: true, DBMaxConns: 16,
		Drain: 5 * time.Second, RateLimit: opts.RateLimit.PerSecond, RateBurst: opts.RateLimit.Burst}
	tools := e.Tools()
	if opts.ToolsYAML != nil {
		reg, err := tool.Parse(opts.ToolsYAML, e.Getenv)
		require.NoError(t, err)
		tools = reg
	}
	o := service.Options{Logger: logger, Tools: tools, TLS: opts.TLS,
		Executors: executor.NewDefaultRegistry(opts.HTTPClient, logger), Hooks: opts.Hooks, NoReconciler: opts.NoReconciler,
		Ledger: func(c *ledger.Config) {
			// The test's ledger configuration, with the Env's secret.
			*c = opts.Ledger
			c.DownstreamSecret = e.Secret
		}}
	// Built with -tags failpoints, the server has the failpoints and the
	// defects OPLEDGER_UNSAFE_DEFECTS names, as the chaos binary's have
	// (e.g. the ledger's tests run against a defect, docs/reliability.md).
	failpoint.Install(&o)
	svc, err := service.New(ctx, cfg, o)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, lis, nil) }()
	creds := insecure.NewCredentials()
	if opts.ClientTLS != nil {
		creds = credentials.NewTLS(opts.ClientTLS)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	stop := sync.OnceFunc(func() {
		_ = conn.Close()
		cancel()
		<-done
	})
	t.Cleanup(stop)
	return &Server{Addr: lis.Addr().String(), Ledger: svc.Ledger, Conn: conn, Client: opledgerv1.NewLedgerServiceClient(conn), Store: svc.Store, stop: stop}
}

// Dial returns a client for a server address.
func Dial(t testing.TB, addr string) opledgerv1.LedgerServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return opledgerv1.NewLedgerServiceClient(conn)
}

// Ctx returns a context that authenticates with key and, if idem is not
// empty, carries it as the idempotency key.
func Ctx(key, idem string) context.Context {
	md := metadata.Pairs("authorization", "Bearer "+key)
	if idem != "" {
		md.Append("idempotency-key", idem)
	}
	return metadata.NewOutgoingContext(context.Background(), md)
}

// Unique returns a string unique within the test binary, for keys.
func Unique(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}
