package service

import "time"

// Config is every setting of an opledger process (`opledger serve`, the
// server inside `opledger dev`, the test harness and the benchmark): the one
// documented configuration. In the binary each field is set by the flag
// named in its comment or, when the flag is not given, by the OPLEDGER_*
// environment variable named with it; the database comes from DATABASE_URL.
type Config struct {
	// Listen is the gRPC address (--listen, OPLEDGER_LISTEN).
	Listen string
	// DatabaseURL is the PostgreSQL connection string (--database-url,
	// DATABASE_URL).
	DatabaseURL string
	// Tools is the tools file (--tools, OPLEDGER_TOOLS). serve requires it;
	// only dev falls back to the built-in demo tools, whose processor URL it
	// knows.
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
	// AuditSigningKey is the file of the Ed25519 key (opledger audit
	// keygen) that signs the receipts' checkpoints (--audit-signing-key,
	// OPLEDGER_AUDIT_SIGNING_KEY); empty: the chains are written but no
	// checkpoint is signed (docs/audit.md).
	AuditSigningKey string
	// AuditNoReceipts writes events without their hash chains
	// (--audit-no-receipts, OPLEDGER_AUDIT_NO_RECEIPTS): the bench's
	// baseline for what the receipts cost (docs/performance.md), never a
	// production setting, since what it writes no verification covers.
	AuditNoReceipts bool
	// AuditCheckpointInterval is how often one replica signs a checkpoint
	// of the chain heads changed since the last
	// (--audit-checkpoint-interval, OPLEDGER_AUDIT_CHECKPOINT_INTERVAL); 0:
	// a minute.
	AuditCheckpointInterval time.Duration
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
	// GCPercent is the Go garbage collector's target that serve and dev set
	// for their process (runtime/debug.SetGCPercent) unless the GOGC
	// variable is set, which wins (--gc-percent, OPLEDGER_GC_PERCENT). A
	// replica's live heap is small, so at Go's default of 100 it collects
	// often and the collections' fixed cost is a tenth of its CPU; 400
	// trades heap headroom (up to five times the live heap) for about 10 %
	// less CPU per new tool call (docs/performance.md, finding 21).
	// service.New leaves it alone: it is a setting of the process.
	GCPercent int
	// AuthCacheTTL is how long each replica remembers an authenticated API
	// key, and so how long a revoked key may keep working there
	// (--auth-cache-ttl, OPLEDGER_AUTH_CACHE_TTL).
	AuthCacheTTL time.Duration
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
	// Timeouts bound how long a client of any listener (gRPC, webhooks,
	// console, metrics) may take to send a request (--header-timeout,
	// --body-timeout, OPLEDGER_HEADER_TIMEOUT, OPLEDGER_BODY_TIMEOUT); a
	// zero field is its default.
	Timeouts
}

// Defaults of Timeouts.
const (
	DefaultHeaderTimeout = 5 * time.Second
	DefaultBodyTimeout   = 30 * time.Second
)

// Timeouts bound how long a client may take to send a request, so that a
// client trickling one cannot hold a connection (and what it holds) open
// indefinitely. Every listener of opledger serve and of opledger mcp --listen
// applies them.
type Timeouts struct {
	// Header bounds an HTTP request's line and headers, and how long an
	// idle keep-alive connection is kept; on gRPC, a connection's setup
	// (the TLS handshake and HTTP/2's preface and settings).
	Header time.Duration
	// Body bounds an HTTP request's body, counted from the end of its
	// headers; on gRPC, a unary call's request message (and a stream's
	// first), counted from the call's headers.
	Body time.Duration
}

// WithDefaults returns t with each zero field replaced by its default.
func (t Timeouts) WithDefaults() Timeouts {
	if t.Header == 0 {
		t.Header = DefaultHeaderTimeout
	}
	if t.Body == 0 {
		t.Body = DefaultBodyTimeout
	}
	return t
}
