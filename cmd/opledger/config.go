package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"
)

// Config is every setting of `opledger serve` (and of the server inside
// `opledger dev`). Each field is set by a flag or, when the flag is not
// given, by the OPLEDGER_* environment variable named in its tag; the
// database comes from DATABASE_URL.
type Config struct {
	// Listen is the gRPC address (--listen, OPLEDGER_LISTEN).
	Listen string
	// DatabaseURL is the PostgreSQL connection string (--database-url,
	// DATABASE_URL).
	DatabaseURL string
	// Tools is the tools file (--tools, OPLEDGER_TOOLS); empty means the
	// built-in demo tools.
	Tools string
	// DownstreamSecret keys the HMAC deriving downstream idempotency keys
	// (OPLEDGER_DOWNSTREAM_SECRET, hex, at least 16 bytes). Every replica
	// must share it. It only affects operations prepared after a change.
	DownstreamSecret []byte
	// Reflection serves gRPC server reflection (--reflection,
	// OPLEDGER_REFLECTION).
	Reflection bool
	// Migrate applies pending migrations at start (--migrate,
	// OPLEDGER_MIGRATE).
	Migrate bool
	// MinLease is the shortest execution lease (--min-lease,
	// OPLEDGER_MIN_LEASE).
	MinLease time.Duration
	// MaxWait caps ExecuteRequest.wait (--max-wait, OPLEDGER_MAX_WAIT).
	MaxWait time.Duration
	// ReconcileInterval is the background reconciler's tick
	// (--reconcile-interval, OPLEDGER_RECONCILE_INTERVAL).
	ReconcileInterval time.Duration
	// ReconcileBackoff is the first delay between reconciliation attempts of
	// one operation (--reconcile-backoff, OPLEDGER_RECONCILE_BACKOFF).
	ReconcileBackoff time.Duration
	// DBMaxConns caps the connection pool (--db-max-conns,
	// OPLEDGER_DB_MAX_CONNS); 0 is pgxpool's default.
	DBMaxConns int
	// ServerID names this replica in leases and event logs (--server-id,
	// OPLEDGER_SERVER_ID); empty picks a random one.
	ServerID string
	// LogLevel is debug, info, warn or error (--log-level,
	// OPLEDGER_LOG_LEVEL).
	LogLevel string
	// Drain bounds graceful shutdown (--drain, OPLEDGER_DRAIN).
	Drain time.Duration
	// MetricsListen serves Prometheus /metrics on its own address
	// (--metrics-listen, OPLEDGER_METRICS_LISTEN); empty: off.
	MetricsListen string
	// TLSCert and TLSKey enable TLS on the gRPC listener (--tls-cert,
	// --tls-key, OPLEDGER_TLS_CERT, OPLEDGER_TLS_KEY); TLSClientCA
	// additionally requires client certificates signed by it (mTLS;
	// --tls-client-ca, OPLEDGER_TLS_CLIENT_CA).
	TLSCert, TLSKey, TLSClientCA string
	// RateLimit and RateBurst bound each tenant's requests per second in
	// this replica (--rate-limit, --rate-burst, OPLEDGER_RATE_LIMIT,
	// OPLEDGER_RATE_BURST); 0: unlimited.
	RateLimit float64
	RateBurst int
	// OpsPerMinute caps the operations a tenant may create per minute,
	// across replicas (--tenant-ops-per-minute,
	// OPLEDGER_TENANT_OPS_PER_MINUTE); 0: no quota.
	OpsPerMinute int
	// MaxDeadline caps every call's deadline (--max-deadline,
	// OPLEDGER_MAX_DEADLINE).
	MaxDeadline time.Duration
	// Retention keeps finished operations this long before pruning them
	// (--retention, OPLEDGER_RETENTION).
	Retention time.Duration
	// WebhookListen serves POST /webhooks/{tool} for downstreams' signed
	// completion events (--webhook-listen, OPLEDGER_WEBHOOK_LISTEN); empty:
	// off.
	WebhookListen string
	// FinishedCache is how many finished operations this replica keeps in
	// memory to answer replayed Executes without a database round trip
	// (--finished-cache, OPLEDGER_FINISHED_CACHE); 0: off.
	FinishedCache int
	// ConsoleListen serves the approval console at / (--console-listen,
	// OPLEDGER_CONSOLE_LISTEN); empty: off. Plain HTTP only on a loopback
	// address: elsewhere it needs --tls-cert or an https --console-url.
	ConsoleListen string
	// ConsoleURL is where people reach the console (--console-url,
	// OPLEDGER_CONSOLE_URL), for links in notifications; https:// also
	// marks cookies Secure behind a TLS-terminating proxy. Default: the
	// console's own address.
	ConsoleURL string
	// ApprovalWebhookURL receives a signed POST whenever an operation starts
	// awaiting approval (--approval-webhook-url,
	// OPLEDGER_APPROVAL_WEBHOOK_URL); empty: off.
	ApprovalWebhookURL string
	// ApprovalWebhookSecret signs those POSTs (--approval-webhook-secret,
	// OPLEDGER_APPROVAL_WEBHOOK_SECRET); required with the URL.
	ApprovalWebhookSecret string
	// ApprovalWebhookArgs puts the operation's arguments in the payload
	// (--approval-webhook-args, OPLEDGER_APPROVAL_WEBHOOK_ARGS).
	ApprovalWebhookArgs bool
	// ApprovalWebhookBackoff is the delay after the first failed delivery,
	// doubling up to 5 minutes (--approval-webhook-backoff,
	// OPLEDGER_APPROVAL_WEBHOOK_BACKOFF).
	ApprovalWebhookBackoff time.Duration
}

// bindConfig registers cfg's flags on fs with defaults taken from the
// environment, so that a flag beats its variable and the variable beats the
// built-in default.
func bindConfig(fs *flag.FlagSet, cfg *Config, getenv func(string) string) (finish func() error) {
	str := func(p *string, name, env, def, usage string) {
		if v := getenv(env); v != "" {
			def = v
		}
		fs.StringVar(p, name, def, usage+" (env "+env+")")
	}
	var secret, reflection, migrate, maxConns string
	var minLease, maxWait, recInterval, recBackoff, drain string
	str(&cfg.Listen, "listen", "OPLEDGER_LISTEN", "127.0.0.1:50051", "gRPC listen address HOST:PORT")
	str(&cfg.DatabaseURL, "database-url", "DATABASE_URL", "", "PostgreSQL connection string")
	str(&cfg.Tools, "tools", "OPLEDGER_TOOLS", "", "tools file (YAML); empty: the built-in demo tools")
	str(&secret, "downstream-secret", "OPLEDGER_DOWNSTREAM_SECRET", "", "hex secret (>= 16 bytes) for downstream keys")
	str(&reflection, "reflection", "OPLEDGER_REFLECTION", "true", "serve gRPC server reflection")
	str(&migrate, "migrate", "OPLEDGER_MIGRATE", "true", "apply migrations at start")
	str(&minLease, "min-lease", "OPLEDGER_MIN_LEASE", "30s", "shortest execution lease")
	str(&maxWait, "max-wait", "OPLEDGER_MAX_WAIT", "30s", "cap on ExecuteRequest.wait")
	str(&recInterval, "reconcile-interval", "OPLEDGER_RECONCILE_INTERVAL", "1s", "background reconciler tick")
	str(&recBackoff, "reconcile-backoff", "OPLEDGER_RECONCILE_BACKOFF", "1s", "first backoff between reconciliations of one operation")
	str(&maxConns, "db-max-conns", "OPLEDGER_DB_MAX_CONNS", "0", "connection pool size (0: default)")
	str(&cfg.ServerID, "server-id", "OPLEDGER_SERVER_ID", "", "this replica's name in leases and events")
	str(&cfg.LogLevel, "log-level", "OPLEDGER_LOG_LEVEL", "info", "debug, info, warn or error")
	str(&drain, "drain", "OPLEDGER_DRAIN", "10s", "graceful shutdown bound")
	str(&cfg.MetricsListen, "metrics-listen", "OPLEDGER_METRICS_LISTEN", "", "Prometheus /metrics address HOST:PORT (empty: off)")
	str(&cfg.WebhookListen, "webhook-listen", "OPLEDGER_WEBHOOK_LISTEN", "", "HTTP address for POST /webhooks/{tool} (empty: off)")
	str(&cfg.ConsoleListen, "console-listen", "OPLEDGER_CONSOLE_LISTEN", "", "approval console address HOST:PORT (empty: off)")
	str(&cfg.ConsoleURL, "console-url", "OPLEDGER_CONSOLE_URL", "", "the console's public URL, for links (default: from --console-listen)")
	var hookArgs, hookBackoff string
	str(&cfg.ApprovalWebhookURL, "approval-webhook-url", "OPLEDGER_APPROVAL_WEBHOOK_URL", "", "POST a signed notification here when an operation starts awaiting approval (empty: off)")
	str(&cfg.ApprovalWebhookSecret, "approval-webhook-secret", "OPLEDGER_APPROVAL_WEBHOOK_SECRET", "", "HMAC secret signing the approval notifications (required with the URL)")
	str(&hookArgs, "approval-webhook-args", "OPLEDGER_APPROVAL_WEBHOOK_ARGS", "false", "include the operation's arguments in approval notifications")
	str(&hookBackoff, "approval-webhook-backoff", "OPLEDGER_APPROVAL_WEBHOOK_BACKOFF", "1s", "delay after a failed notification, doubling up to 5m")
	str(&cfg.TLSCert, "tls-cert", "OPLEDGER_TLS_CERT", "", "PEM certificate for TLS on the gRPC listener")
	str(&cfg.TLSKey, "tls-key", "OPLEDGER_TLS_KEY", "", "PEM private key for --tls-cert")
	str(&cfg.TLSClientCA, "tls-client-ca", "OPLEDGER_TLS_CLIENT_CA", "", "PEM CA bundle; when set, clients must present a certificate it signed (mTLS)")
	var rateLimit, rateBurst, opsPerMinute, maxDeadline, retention, finishedCache string
	str(&rateLimit, "rate-limit", "OPLEDGER_RATE_LIMIT", "0", "requests per second per tenant in this replica (0: unlimited)")
	str(&rateBurst, "rate-burst", "OPLEDGER_RATE_BURST", "0", "burst for --rate-limit (0: the rate)")
	str(&opsPerMinute, "tenant-ops-per-minute", "OPLEDGER_TENANT_OPS_PER_MINUTE", "0", "operations a tenant may create per minute, all replicas (0: no quota)")
	str(&maxDeadline, "max-deadline", "OPLEDGER_MAX_DEADLINE", "2m", "cap on every call's deadline")
	str(&retention, "retention", "OPLEDGER_RETENTION", "720h", "keep finished operations this long")
	str(&finishedCache, "finished-cache", "OPLEDGER_FINISHED_CACHE", "16384", "finished operations kept in memory for replays (0: off)")
	return func() error {
		var errs []error
		dur := func(p *time.Duration, name, v string) {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Errorf("--%s: %q is not a duration", name, v))
			}
			*p = d
		}
		boolean := func(p *bool, name, v string) {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("--%s: %q is not true or false", name, v))
			}
			*p = b
		}
		boolean(&cfg.Reflection, "reflection", reflection)
		boolean(&cfg.Migrate, "migrate", migrate)
		dur(&cfg.MinLease, "min-lease", minLease)
		dur(&cfg.MaxWait, "max-wait", maxWait)
		dur(&cfg.ReconcileInterval, "reconcile-interval", recInterval)
		dur(&cfg.ReconcileBackoff, "reconcile-backoff", recBackoff)
		dur(&cfg.Drain, "drain", drain)
		dur(&cfg.MaxDeadline, "max-deadline", maxDeadline)
		dur(&cfg.Retention, "retention", retention)
		if f, err := strconv.ParseFloat(rateLimit, 64); err != nil || f < 0 {
			errs = append(errs, fmt.Errorf("--rate-limit: %q is not a rate", rateLimit))
		} else {
			cfg.RateLimit = f
		}
		for _, c := range []struct {
			p    *int
			name string
			v    string
		}{{&cfg.RateBurst, "rate-burst", rateBurst}, {&cfg.OpsPerMinute, "tenant-ops-per-minute", opsPerMinute},
			{&cfg.FinishedCache, "finished-cache", finishedCache}} {
			n, err := strconv.Atoi(c.v)
			if err != nil || n < 0 {
				errs = append(errs, fmt.Errorf("--%s: %q is not a count", c.name, c.v))
			}
			*c.p = n
		}
		if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
			errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
		}
		if cfg.TLSClientCA != "" && cfg.TLSCert == "" {
			errs = append(errs, errors.New("--tls-client-ca needs --tls-cert and --tls-key"))
		}
		boolean(&cfg.ApprovalWebhookArgs, "approval-webhook-args", hookArgs)
		dur(&cfg.ApprovalWebhookBackoff, "approval-webhook-backoff", hookBackoff)
		if cfg.ApprovalWebhookURL != "" {
			if u, err := url.Parse(cfg.ApprovalWebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("--approval-webhook-url: %q is not an http(s) URL", cfg.ApprovalWebhookURL))
			}
			if len(cfg.ApprovalWebhookSecret) < 16 {
				errs = append(errs, errors.New("--approval-webhook-secret: at least 16 characters are needed to sign the notifications"))
			}
		}
		if cfg.ConsoleURL != "" {
			if u, err := url.Parse(cfg.ConsoleURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("--console-url: %q is not an http(s) URL", cfg.ConsoleURL))
			}
		}
		n, err := strconv.Atoi(maxConns)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("--db-max-conns: %q is not a count", maxConns))
		}
		cfg.DBMaxConns = n
		if secret != "" {
			b, err := hex.DecodeString(secret)
			if err != nil || len(b) < 16 {
				errs = append(errs, errors.New("OPLEDGER_DOWNSTREAM_SECRET must be at least 32 hex digits"))
			}
			cfg.DownstreamSecret = b
		}
		return errors.Join(errs...)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
