package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/service"
)

// Config is every setting of `opledger serve`: see service.Config.
type Config = service.Config

// bindConfig registers cfg's flags on fs. The returned finish, called after
// fs.Parse, fills what the command line left alone from the OPLEDGER_*
// variables (a flag beats its variable, the variable beats the built-in
// default) and checks the values.
func bindConfig(fs *flag.FlagSet, cfg *Config, getenv func(string) string) (finish func() error) {
	e := newEnvFlags(fs)
	d := ledger.Defaults() // the ledger's defaults are the flags'
	e.str(&cfg.Listen, "listen", "OPLEDGER_LISTEN", "127.0.0.1:50051", "gRPC listen address `HOST:PORT`")
	e.str(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection `URL`")
	e.str(&cfg.Tools, "tools", "OPLEDGER_TOOLS", "", "tools `FILE` (YAML, docs/tools.md); required by serve, dev defaults to the built-in demo tools")
	e.value(hexSecret{&cfg.DownstreamSecret}, "downstream-secret", "OPLEDGER_DOWNSTREAM_SECRET",
		"`hex` secret (at least 16 bytes) keying the downstream idempotency keys; the same on every replica")
	e.boolean(&cfg.Reflection, "reflection", "OPLEDGER_REFLECTION", true, "serve gRPC server reflection")
	e.boolean(&cfg.Migrate, "migrate", "OPLEDGER_MIGRATE", true, "apply pending migrations at start")
	e.duration(&cfg.MinLease, "min-lease", "OPLEDGER_MIN_LEASE", d.MinLease, "shortest execution lease")
	e.duration(&cfg.MaxWait, "max-wait", "OPLEDGER_MAX_WAIT", d.MaxWait, "cap on ExecuteRequest.wait")
	e.duration(&cfg.ReconcileInterval, "reconcile-interval", "OPLEDGER_RECONCILE_INTERVAL", d.ReconcileInterval, "background reconciler tick")
	e.duration(&cfg.ReconcileBackoff, "reconcile-backoff", "OPLEDGER_RECONCILE_BACKOFF", d.ReconcileBackoff, "first backoff between reconciliations of one operation")
	e.integer(&cfg.DBMaxConns, "db-max-conns", "OPLEDGER_DB_MAX_CONNS", 0, "connection pool size (0: pgxpool's default)")
	e.str(&cfg.ServerID, "server-id", "OPLEDGER_SERVER_ID", "", "this replica's `name` in leases and events (default: random)")
	e.str(&cfg.LogLevel, "log-level", "OPLEDGER_LOG_LEVEL", "info", "`level` of the JSON logs on standard error: debug, info, warn or error")
	e.duration(&cfg.Drain, "drain", "OPLEDGER_DRAIN", 10*time.Second, "graceful shutdown bound")
	e.str(&cfg.MetricsListen, "metrics-listen", "OPLEDGER_METRICS_LISTEN", "", "Prometheus /metrics address `HOST:PORT` (empty: off)")
	e.str(&cfg.WebhookListen, "webhook-listen", "OPLEDGER_WEBHOOK_LISTEN", "", "`HOST:PORT` for POST /webhooks/{tool} (empty: off)")
	e.str(&cfg.ConsoleListen, "console-listen", "OPLEDGER_CONSOLE_LISTEN", "", "approval console address `HOST:PORT` (empty: off; dev: 127.0.0.1:8080)")
	e.str(&cfg.ConsoleURL, "console-url", "OPLEDGER_CONSOLE_URL", "", "the console's public `URL`, for links; https also marks cookies Secure behind a TLS proxy")
	e.str(&cfg.ApprovalWebhookURL, "approval-webhook-url", "OPLEDGER_APPROVAL_WEBHOOK_URL", "", "POST a signed notification to this `URL` when an operation starts awaiting approval (empty: off)")
	e.str(&cfg.ApprovalWebhookSecret, "approval-webhook-secret", "OPLEDGER_APPROVAL_WEBHOOK_SECRET", "", "`secret` (at least 16 characters) signing the approval notifications; required with the URL")
	e.boolean(&cfg.ApprovalWebhookArgs, "approval-webhook-args", "OPLEDGER_APPROVAL_WEBHOOK_ARGS", false, "include the operation's arguments in approval notifications")
	e.duration(&cfg.ApprovalWebhookBackoff, "approval-webhook-backoff", "OPLEDGER_APPROVAL_WEBHOOK_BACKOFF", d.ApprovalWebhook.Backoff, "delay after a failed approval notification, doubling up to 5m")
	e.str(&cfg.TLSCert, "tls-cert", "OPLEDGER_TLS_CERT", "", "PEM certificate `FILE` for TLS on the gRPC listener")
	e.str(&cfg.TLSKey, "tls-key", "OPLEDGER_TLS_KEY", "", "PEM private key `FILE` for --tls-cert")
	e.str(&cfg.TLSClientCA, "tls-client-ca", "OPLEDGER_TLS_CLIENT_CA", "", "PEM CA bundle `FILE`; when set, clients must present a certificate it signed (mTLS)")
	e.float(&cfg.RateLimit, "rate-limit", "OPLEDGER_RATE_LIMIT", 0, "requests per second per tenant in this replica (0: unlimited)")
	e.integer(&cfg.RateBurst, "rate-burst", "OPLEDGER_RATE_BURST", 0, "burst for --rate-limit (0: the rate)")
	e.integer(&cfg.OpsPerMinute, "tenant-ops-per-minute", "OPLEDGER_TENANT_OPS_PER_MINUTE", 0, "operations a tenant may create per minute, all replicas (0: no quota)")
	e.duration(&cfg.MaxDeadline, "max-deadline", "OPLEDGER_MAX_DEADLINE", 2*time.Minute, "cap on every call's deadline")
	e.str(&cfg.AuditSigningKey, "audit-signing-key", "OPLEDGER_AUDIT_SIGNING_KEY", "", "Ed25519 key `FILE` (opledger audit keygen) signing the receipts' checkpoints (empty: chains only, no checkpoints)")
	e.boolean(&cfg.AuditNoReceipts, "audit-no-receipts", "OPLEDGER_AUDIT_NO_RECEIPTS", false, "write events without hash chains: the bench's baseline only, never production (docs/audit.md)")
	e.duration(&cfg.AuditCheckpointInterval, "audit-checkpoint-interval", "OPLEDGER_AUDIT_CHECKPOINT_INTERVAL", time.Minute, "how often one replica signs a checkpoint of the chain heads changed since the last")
	e.duration(&cfg.Retention, "retention", "OPLEDGER_RETENTION", d.Retention, "keep finished operations this long")
	e.integer(&cfg.FinishedCache, "finished-cache", "OPLEDGER_FINISHED_CACHE", d.FinishedCacheSize, "finished operations kept in memory for replays (0: off, and the READY copies kept for the next Execute too)")
	e.integer(&cfg.GCPercent, "gc-percent", "OPLEDGER_GC_PERCENT", defaultGCPercent, "Go garbage collector target `percent` for this process; the GOGC variable, when set, wins")
	bindTimeouts(e, &cfg.Timeouts, "every listener")
	e.duration(&cfg.AuthCacheTTL, "auth-cache-ttl", "OPLEDGER_AUTH_CACHE_TTL", d.AuthCacheTTL,
		"how long an authenticated API key is remembered; bounds how long a revoked key keeps working")
	return func() error {
		if err := e.apply(getenv); err != nil {
			return err
		}
		var errs []error
		if err := checkLogLevel(cfg.LogLevel); err != nil {
			errs = append(errs, err)
		}
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"min-lease", cfg.MinLease}, {"max-wait", cfg.MaxWait}, {"reconcile-interval", cfg.ReconcileInterval},
			{"reconcile-backoff", cfg.ReconcileBackoff}, {"drain", cfg.Drain}, {"max-deadline", cfg.MaxDeadline},
			{"retention", cfg.Retention}, {"approval-webhook-backoff", cfg.ApprovalWebhookBackoff},
			{"audit-checkpoint-interval", cfg.AuditCheckpointInterval}} {
			if d.v < 0 {
				errs = append(errs, fmt.Errorf("--%s: %s is negative", d.name, d.v))
			}
		}
		errs = append(errs, checkTimeouts(cfg.Timeouts))
		if cfg.GCPercent <= 0 {
			errs = append(errs, fmt.Errorf("--gc-percent: %d is not positive (GOGC=off turns the collector off)", cfg.GCPercent))
		}
		if cfg.AuthCacheTTL <= 0 {
			errs = append(errs, fmt.Errorf("--auth-cache-ttl: %s is not positive", cfg.AuthCacheTTL))
		}
		if cfg.RateLimit < 0 {
			errs = append(errs, fmt.Errorf("--rate-limit: %g is negative", cfg.RateLimit))
		}
		for _, c := range []struct {
			name string
			v    int
		}{{"rate-burst", cfg.RateBurst}, {"tenant-ops-per-minute", cfg.OpsPerMinute},
			{"finished-cache", cfg.FinishedCache}, {"db-max-conns", cfg.DBMaxConns}} {
			if c.v < 0 {
				errs = append(errs, fmt.Errorf("--%s: %d is not a count", c.name, c.v))
			}
		}
		if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
			errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
		}
		if cfg.TLSClientCA != "" && cfg.TLSCert == "" {
			errs = append(errs, errors.New("--tls-client-ca needs --tls-cert and --tls-key"))
		}
		if cfg.ApprovalWebhookURL != "" {
			if !httpURL(cfg.ApprovalWebhookURL) {
				errs = append(errs, errors.New("--approval-webhook-url: not an http(s) URL (not repeated here: it may hold a credential)"))
			}
			if len(cfg.ApprovalWebhookSecret) < 16 {
				errs = append(errs, errors.New("--approval-webhook-secret: at least 16 characters are needed to sign the notifications"))
			}
		}
		if cfg.ApprovalWebhookURL != "" && cfg.ConsoleURL == "" && everyInterface(cfg.ConsoleListen) {
			errs = append(errs, fmt.Errorf("--console-url: the console listens on every interface (%s), which is no address to link to; approval notifications link to the console, so say where people reach it", cfg.ConsoleListen))
		}
		if cfg.ConsoleURL != "" && !httpURL(cfg.ConsoleURL) {
			errs = append(errs, fmt.Errorf("--console-url: %q is not an http(s) URL", cfg.ConsoleURL))
		}
		return errors.Join(errs...)
	}
}

// everyInterface reports a listen address on the unspecified host
// ("0.0.0.0:8443", "[::]:8443", ":8443").
func everyInterface(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	return host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified()
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// bindTimeouts registers the listeners' timeouts (service.Timeouts), for
// serve and for mcp --listen alike.
func bindTimeouts(e *envFlags, t *service.Timeouts, which string) {
	e.duration(&t.Header, "header-timeout", "OPLEDGER_HEADER_TIMEOUT", service.DefaultHeaderTimeout,
		"how long a client of "+which+" may take to send a request's headers (gRPC: to set a connection up); also how long an idle HTTP connection is kept")
	e.duration(&t.Body, "body-timeout", "OPLEDGER_BODY_TIMEOUT", service.DefaultBodyTimeout,
		"how long a client of "+which+" may take to send a request's body once its headers are in (gRPC: a call's request message)")
}

// checkTimeouts refuses a timeout that is not positive.
func checkTimeouts(t service.Timeouts) error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"header-timeout", t.Header}, {"body-timeout", t.Body}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s: %s is not positive", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}
