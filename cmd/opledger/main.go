// Command opledger is the execution ledger for AI agents' side-effecting
// tool calls: `serve` runs the gRPC service, `dev` a self-contained local
// setup, `migrate` applies the schema, `keys create` issues API keys and
// `fakepay` runs the fake payment processor.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/fakepay"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/ledger"
	"github.com/opledger/opledger/metrics"
	"github.com/opledger/opledger/server"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

const usage = `usage: opledger <command> [flags]

commands:
  serve        run the gRPC ledger service (DATABASE_URL, --listen, --tools)
  dev          start a private PostgreSQL, the fake processor and the service, with demo keys
  migrate      apply pending database migrations (DATABASE_URL)
  keys create  create an API key: --tenant T --role agent|approver|operator [--name N]
  fakepay      run the fake payment processor (--listen HOST:PORT)
  chaos        run the fault-injection suite and check every effect (--duration D)
  bench        measure throughput and latency against baselines (--quick)

Run 'opledger <command> -h' for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "opledger:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "serve":
		return cmdServe(ctx, args[1:], stderr, getenv)
	case "dev":
		return cmdDev(ctx, args[1:], stdout, stderr, getenv)
	case "migrate":
		return cmdMigrate(ctx, args[1:], stdout, stderr, getenv)
	case "keys":
		if len(args) < 2 || args[1] != "create" {
			return errors.New("usage: opledger keys create --tenant T --role agent|approver|operator [--name N]")
		}
		return cmdKeysCreate(ctx, args[2:], stdout, stderr, getenv)
	case "fakepay":
		return cmdFakepay(ctx, args[1:], stderr, getenv)
	case "chaos":
		return cmdChaos(ctx, args[1:], stdout, stderr, getenv)
	case "bench":
		return cmdBench(ctx, args[1:], stdout, stderr, getenv)
	case "bench-floor":
		return cmdBenchFloor(ctx, args[1:], stderr, getenv)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

func cmdServe(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	finish := bindConfig(fs, &cfg, getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := finish(); err != nil {
		return err
	}
	logger := newLogger(stderr, cfg.LogLevel)
	return serve(ctx, cfg, logger, getenv, nil)
}

// serve runs the service until ctx ends. ready, if set, receives the bound
// address once the listener is open.
func serve(ctx context.Context, cfg Config, logger *slog.Logger, getenv func(string) string, ready func(addr string)) error {
	if cfg.DatabaseURL == "" {
		return errors.New("DATABASE_URL is not set")
	}
	if len(cfg.DownstreamSecret) == 0 {
		return errors.New("OPLEDGER_DOWNSTREAM_SECRET is not set: every replica needs the same secret (32+ hex digits) to derive downstream idempotency keys")
	}
	var reg *tool.Registry
	var err error
	if cfg.Tools == "" {
		reg, err = tool.Parse(examples.ToolsYAML, getenv)
	} else {
		reg, err = tool.Load(cfg.Tools, getenv)
	}
	if err != nil {
		return err
	}
	shutdownTracing, tracing, err := setupTracing(ctx, getenv, os.Stderr)
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.WithoutCancel(ctx)) }()
	if cfg.Migrate {
		applied, err := store.Migrate(ctx, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		if len(applied) > 0 {
			logger.Info("applied migrations", "versions", applied)
		}
	}
	st, err := store.Open(ctx, store.Config{URL: cfg.DatabaseURL, MaxConns: int32(cfg.DBMaxConns)})
	if err != nil {
		return err
	}
	defer st.Close()
	listener := store.NewListener(cfg.DatabaseURL, logger)
	l, err := ledger.New(ledger.Config{
		ServerID: cfg.ServerID, DownstreamSecret: cfg.DownstreamSecret, MinLease: cfg.MinLease, MaxWait: cfg.MaxWait,
		ReconcileInterval: cfg.ReconcileInterval, ReconcileBackoff: cfg.ReconcileBackoff,
		OpsPerMinute: cfg.OpsPerMinute, Retention: cfg.Retention, FinishedCacheSize: finishedCacheSize(cfg.FinishedCache),
		ApprovalWebhook: ledger.ApprovalWebhook{URL: cfg.ApprovalWebhookURL, Secret: cfg.ApprovalWebhookSecret,
			IncludeArgs: cfg.ApprovalWebhookArgs, ConsoleURL: consoleURL(cfg), Backoff: cfg.ApprovalWebhookBackoff},
	}, st, reg, executor.NewDefaultRegistry(nil, logger), listener, logger)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	bg, cancelBG := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBG()
	go listener.Run(bg)
	go l.RunReconciler(bg)
	go l.RunPruner(bg)
	go l.RunNotifier(bg)
	m := metrics.New(st.OperationCountOpen)
	l.SetObserver(m)
	if cfg.MetricsListen != "" {
		mlis, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = msrv.Serve(mlis) }()
		defer msrv.Close()
		logger.Info("serving metrics", "listen", mlis.Addr().String())
	}
	if cfg.WebhookListen != "" {
		wlis, err := net.Listen("tcp", cfg.WebhookListen)
		if err != nil {
			return fmt.Errorf("webhook listener: %w", err)
		}
		wsrv := &http.Server{Handler: server.WebhookHandler(l, logger), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = wsrv.Serve(wlis) }()
		defer wsrv.Close()
		logger.Info("serving webhooks", "listen", wlis.Addr().String())
	}
	if cfg.ConsoleListen != "" {
		csrv, _, err := startConsole(cfg, l, logger)
		if err != nil {
			return err
		}
		defer csrv.Close()
	}
	tlsCfg, err := serverTLS(cfg)
	if err != nil {
		return err
	}
	srv := server.New(l, server.Options{Reflection: cfg.Reflection, Logger: logger, Metrics: m, TLS: tlsCfg,
		RateLimit:   interceptors.RateLimit{PerSecond: cfg.RateLimit, Burst: cfg.RateBurst},
		MaxDeadline: cfg.MaxDeadline, Retention: l.Retention(), Tracing: tracing})
	var names []string
	for _, t := range reg.List() {
		names = append(names, t.Name+"@"+t.Version)
	}
	logger.Info("serving", "listen", lis.Addr().String(), "server_id", l.ServerID(), "tools", strings.Join(names, ","), "reflection", cfg.Reflection)
	if ready != nil {
		ready(lis.Addr().String())
	}
	err = srv.Serve(ctx, lis, cfg.Drain)
	logger.Info("stopped")
	return err
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", getenv("DATABASE_URL"), "PostgreSQL connection string (env DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	applied, err := store.Migrate(ctx, *url)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrations applied: %v\n", applied)
	return nil
}

func cmdKeysCreate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", getenv("DATABASE_URL"), "PostgreSQL connection string (env DATABASE_URL)")
	tenant := fs.String("tenant", "", "tenant the key belongs to (required)")
	role := fs.String("role", "", "comma-separated roles: agent, approver, operator (required)")
	name := fs.String("name", "", "a name for the principal, unique in the tenant (default: generated)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	if *tenant == "" || *role == "" {
		return errors.New("--tenant and --role are required")
	}
	if _, err := store.Migrate(ctx, *url); err != nil {
		return err
	}
	st, err := store.Open(ctx, store.Config{URL: *url, MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	key, p, err := ledger.CreatePrincipal(ctx, st, *tenant, *name, strings.Split(*role, ","))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "principal %s (%s) in tenant %s with roles %s\n", p.ID, p.Name, p.Tenant, strings.Join(p.Roles, ","))
	fmt.Fprintln(stdout, "the key is shown once and only its hash is stored:")
	fmt.Fprintln(stdout, key)
	return nil
}

func cmdFakepay(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("fakepay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", envOr("OPLEDGER_FAKEPAY_LISTEN", "127.0.0.1:7070"), "HTTP listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return fakepay.ListenAndServe(ctx, *listen, newLogger(stderr, "info"))
}

// finishedCacheSize maps --finished-cache (0: off) to the ledger's setting
// (0: its default, negative: off).
func finishedCacheSize(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
