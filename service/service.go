// Package service wires one opledger process: the store, the notification
// listener, the ledger with its background workers (reconciler, pruner,
// approval notifier), metrics, the gRPC server and the side listeners
// (metrics, webhooks, the approval console). The binary, the test harness
// and the benchmark all start opledger through New, so that what they run
// is what production runs.
package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/internal/console"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/internal/metrics"
	"github.com/opledger/opledger/server"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// Options are what a caller plugs into a service besides its Config.
type Options struct {
	// Logger receives the process's structured logs.
	Logger *slog.Logger
	// Tools are the tools the ledger may run.
	Tools *tool.Registry
	// Executors builds each tool's executor; nil: the built-in HTTP one,
	// with a client of its own.
	Executors *executor.Registry
	// Tracing turns on OpenTelemetry spans per call (to the global tracer
	// provider, which the caller set up).
	Tracing bool
	// TLS, when set, replaces the TLS configuration built from Config's
	// certificate files.
	TLS *tls.Config

	// For tests only (and the chaos build).
	//
	// Hooks are the ledger's interruption points and decorators: a test's,
	// and the chaos build's failpoints and defect switches, which
	// cmd/opledger installs with -tags failpoints (proof/failpoint.Install,
	// which may also replace Executors).
	Hooks *ledger.Hooks
	// NoReconciler leaves the background reconciler off.
	NoReconciler bool
	// Ledger, when set, adjusts the ledger's configuration after it was
	// built from Config.
	Ledger func(*ledger.Config)
}

// Service is one wired opledger process.
type Service struct {
	Config   Config
	Store    *store.Store
	Listener *store.Listener
	Ledger   *ledger.Ledger
	Server   *server.Server
	Metrics  *metrics.Metrics
	// Checkpointer signs the receipts' checkpoints; nil without a signing
	// key.
	Checkpointer *Checkpointer

	opts Options
	log  *slog.Logger
}

// New connects to the database (migrating it when Config.Migrate says so)
// and builds the ledger and the server. Run serves; Close releases what New
// opened when Run is never called.
func New(ctx context.Context, cfg Config, o Options) (*Service, error) {
	if cfg.DatabaseURL == "" {
		return nil, errors.New("DATABASE_URL is not set")
	}
	if len(cfg.DownstreamSecret) == 0 {
		return nil, errors.New("OPLEDGER_DOWNSTREAM_SECRET is not set: every replica needs the same secret (32+ hex digits) to derive downstream idempotency keys")
	}
	if o.Tools == nil {
		return nil, errors.New("service: no tools")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.Executors == nil {
		o.Executors = executor.NewDefaultRegistry(nil, log)
	}
	if cfg.Migrate {
		applied, err := store.Migrate(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, err
		}
		if len(applied) > 0 {
			log.Info("applied migrations", "versions", applied)
		}
	}
	st, err := store.Open(ctx, store.Config{URL: cfg.DatabaseURL, MaxConns: int32(cfg.DBMaxConns), NoReceipts: cfg.AuditNoReceipts})
	if err != nil {
		return nil, err
	}
	if !cfg.Migrate {
		// Migrate checks this itself: a database this binary cannot run
		// with is refused at start, not found out by a failing statement.
		if err := st.CheckSchema(ctx); err != nil {
			st.Close()
			return nil, err
		}
	}
	lcfg := ledger.Config{
		ServerID: cfg.ServerID, DownstreamSecret: cfg.DownstreamSecret, MinLease: cfg.MinLease, MaxWait: cfg.MaxWait,
		AuthCacheTTL: cfg.AuthCacheTTL, ReconcileInterval: cfg.ReconcileInterval, ReconcileBackoff: cfg.ReconcileBackoff,
		OpsPerMinute: cfg.OpsPerMinute, Retention: cfg.Retention, FinishedCacheSize: FinishedCacheSize(cfg.FinishedCache),
		ApprovalWebhook: ledger.ApprovalWebhook{URL: cfg.ApprovalWebhookURL, Secret: cfg.ApprovalWebhookSecret,
			IncludeArgs: cfg.ApprovalWebhookArgs, ConsoleURL: ConsoleURL(cfg), Backoff: cfg.ApprovalWebhookBackoff},
	}
	if o.Ledger != nil {
		o.Ledger(&lcfg)
	}
	listener := store.NewListener(cfg.DatabaseURL, log)
	l, err := ledger.New(lcfg, st, o.Tools, o.Executors, listener, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	if o.Hooks != nil {
		l.SetHooks(o.Hooks)
	}
	m := metrics.New(st.OperationCountOpen)
	l.SetObserver(m)
	tlsCfg := o.TLS
	if tlsCfg == nil {
		if tlsCfg, err = serverTLS(cfg); err != nil {
			st.Close()
			return nil, err
		}
	}
	timeouts := cfg.Timeouts.WithDefaults()
	srv := server.New(l, server.Options{Reflection: cfg.Reflection, Logger: log, Metrics: m, TLS: tlsCfg,
		RateLimit:   interceptors.RateLimit{PerSecond: cfg.RateLimit, Burst: cfg.RateBurst},
		MaxDeadline: cfg.MaxDeadline, Retention: l.Retention(), Tracing: o.Tracing,
		HeaderTimeout: timeouts.Header, BodyTimeout: timeouts.Body})
	svc := &Service{Config: cfg, Store: st, Listener: listener, Ledger: l, Server: srv, Metrics: m, opts: o, log: log}
	if cfg.AuditSigningKey != "" {
		signer, err := LoadAuditSigner(cfg.AuditSigningKey)
		if err != nil {
			st.Close()
			return nil, err
		}
		every := cfg.AuditCheckpointInterval
		if every <= 0 {
			every = time.Minute
		}
		svc.Checkpointer = &Checkpointer{Store: st, Signer: signer, Interval: every, Log: log}
	}
	return svc, nil
}

// Ready tells a caller of Run where the service answers once it does.
type Ready struct {
	// Addr is the gRPC listener's address; ConsoleURL the approval
	// console's, empty when it is off.
	Addr, ConsoleURL string
	// MetricsAddr and WebhookAddr are those listeners' addresses, empty
	// when they are off.
	MetricsAddr, WebhookAddr string
}

// Run serves gRPC on lis, runs the background workers and the side
// listeners the Config asks for, and calls ready (if set) once everything
// listens. When ctx ends it drains in-flight calls (bounded by
// Config.Drain), stops the workers and closes the database pool.
func (s *Service) Run(ctx context.Context, lis net.Listener, ready func(Ready)) error {
	defer s.Store.Close()
	cfg, l := s.Config, s.Ledger
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go s.Listener.Run(bg)
	if !s.opts.NoReconciler {
		go l.RunReconciler(bg)
	}
	go l.RunPruner(bg)
	switch {
	case s.Config.AuditNoReceipts:
		s.log.Warn("audit: --audit-no-receipts: events are written without hash chains, which no verification covers (the bench's baseline only; docs/audit.md)")
	case s.Checkpointer != nil:
		go s.Checkpointer.Run(bg)
	default:
		s.log.Info("audit: no --audit-signing-key: events are hash-chained, but no checkpoint is signed (docs/audit.md)")
	}
	var side []*http.Server
	defer func() {
		for _, h := range side {
			_ = h.Close()
		}
	}()
	r := Ready{Addr: lis.Addr().String()}
	serveSide := func(name, addr string, h http.Handler, at *string) error {
		hl, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s listener: %w", name, err)
		}
		*at = hl.Addr().String()
		hs := HTTPServer(h, cfg.Timeouts, s.log)
		side = append(side, hs)
		go func() { _ = hs.Serve(hl) }()
		s.log.Info("serving "+name, "listen", hl.Addr().String())
		return nil
	}
	if cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.Metrics.Handler())
		if err := serveSide("metrics", cfg.MetricsListen, mux, &r.MetricsAddr); err != nil {
			return err
		}
	}
	if cfg.WebhookListen != "" {
		if err := serveSide("webhooks", cfg.WebhookListen, server.WebhookHandler(l, s.log), &r.WebhookAddr); err != nil {
			return err
		}
	}
	if cfg.ConsoleListen != "" {
		csrv, url, err := startConsole(cfg, s.Ledger, s.log)
		if err != nil {
			return err
		}
		side = append(side, csrv)
		r.ConsoleURL = url
		if cfg.ConsoleURL == "" {
			l.SetApprovalConsoleURL(url) // the address it listens on: its port may be the system's choice
		}
	}
	go l.RunNotifier(bg) // idle unless an approval webhook is configured
	var names []string
	for _, t := range s.opts.Tools.List() {
		names = append(names, t.Name+"@"+t.Version)
	}
	s.log.Info("serving", "listen", r.Addr, "server_id", l.ServerID(), "tools", strings.Join(names, ","), "reflection", cfg.Reflection)
	if ready != nil {
		ready(r)
	}
	err := s.Server.Serve(ctx, lis, cfg.Drain)
	// A call the drain cut short may still be waiting for its downstream:
	// its answer is this process's alone until it is written, so the pool
	// stays open for it (at most the longest lease, plus the write and its
	// retries).
	if n, werr := l.WaitAttempts(context.WithoutCancel(ctx)); werr != nil {
		s.log.Error("stopped with attempts in flight; their leases' end will decide them", "attempts", n)
	}
	s.log.Info("stopped")
	return err
}

// Close releases what New opened, for a service that never ran.
func (s *Service) Close() { s.Store.Close() }

// FinishedCacheSize maps Config.FinishedCache, where 0 is off (the flag's
// default is the ledger's size), to ledger.Config.FinishedCacheSize, where 0
// is the default size and ledger.FinishedCacheOff is off: the one place the
// two meanings of 0 meet.
func FinishedCacheSize(n int) int {
	if n == 0 {
		return ledger.FinishedCacheOff
	}
	return n
}

func serverTLS(cfg Config) (*tls.Config, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	t := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls client ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("tls client ca: no certificate found in " + cfg.TLSClientCA)
		}
		t.ClientCAs = pool
		t.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return t, nil
}

// ConsoleURL is where people reach the console: Config.ConsoleURL, else the
// console's own address (https when it serves TLS); empty when it is off.
func ConsoleURL(cfg Config) string {
	if cfg.ConsoleURL != "" {
		return strings.TrimSuffix(cfg.ConsoleURL, "/")
	}
	if cfg.ConsoleListen == "" {
		return ""
	}
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + cfg.ConsoleListen
}

// httpsURL reports an https URL, its scheme in any case (as url.Parse,
// and the flag's check, read it).
func httpsURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https"
}

// startConsole serves the approval console on ConsoleListen until the
// returned server is closed. The browser must reach it over HTTPS (served
// here with the TLS certificate, or behind a proxy named by an https
// ConsoleURL), except on a loopback address, where plain HTTP is allowed and
// cookies cannot be marked Secure (docs/console.md).
func startConsole(cfg Config, l *ledger.Ledger, logger *slog.Logger) (*http.Server, string, error) {
	secure := cfg.TLSCert != "" || httpsURL(cfg.ConsoleURL)
	host, _, err := net.SplitHostPort(cfg.ConsoleListen)
	if err != nil {
		return nil, "", fmt.Errorf("--console-listen: %w", err)
	}
	if !secure && !loopback(host) {
		return nil, "", errors.New("--console-listen: the console takes API keys and sets session cookies, so on a non-loopback address it needs TLS (--tls-cert/--tls-key) or an https --console-url of the TLS proxy in front of it")
	}
	lis, err := net.Listen("tcp", cfg.ConsoleListen)
	if err != nil {
		return nil, "", fmt.Errorf("console listener: %w (choose another address with --console-listen HOST:PORT; an empty one turns the console off)", err)
	}
	srv := HTTPServer(console.New(l, console.Options{Logger: logger.With("component", "console"), Secure: secure}), cfg.Timeouts, logger)
	srv.WriteTimeout = 30 * time.Second // a page is answered at once: a client that reads it slowly is cut off too
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			_ = lis.Close()
			return nil, "", fmt.Errorf("console tls: %w", err)
		}
		// Browsers present no client certificates: the console authenticates
		// with keys and sessions even when gRPC requires mTLS.
		lis = tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	go func() { _ = srv.Serve(lis) }()
	url := ConsoleURL(cfg)
	if cfg.ConsoleURL == "" {
		url = strings.Replace(url, cfg.ConsoleListen, lis.Addr().String(), 1)
	}
	logger.Info("serving the approval console", "listen", lis.Addr().String(), "url", url, "secure_cookies", secure)
	return srv, url, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
