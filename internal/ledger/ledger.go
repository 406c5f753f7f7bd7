// Package ledger is opledger's execution ledger: the operation state machine
// and the rules of Prepare, Approve, Execute, Get and Reconcile, on top of
// the store. It decides; the store enforces with guarded statements; the
// server translates.
package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/cache"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// Operation is a ledger row as the ledger hands it out.
type Operation = store.Operation

// OperationEvent is one entry of an operation's event log.
type OperationEvent = store.Event

// Config tunes the ledger. Zero values take the defaults noted, which
// Defaults holds.
type Config struct {
	// ServerID names this process in leases and event logs.
	ServerID string
	// DownstreamSecret keys the HMAC that derives downstream keys.
	DownstreamSecret []byte
	// MinLease is the shortest lease an executor gets (default 30s); a tool's
	// lease is max(MinLease, timeout × attempts + 5s).
	MinLease time.Duration
	// MaxWait caps ExecuteRequest.wait (default 30s).
	MaxWait time.Duration
	// WaitPoll is how often a waiting Execute reads the operation again
	// even without a wake-up (default 500ms): a notification can be lost
	// while the listener reconnects.
	WaitPoll time.Duration
	// MaxArgsBytes bounds the canonical args (default 64 KiB).
	MaxArgsBytes int
	// ReconcileInterval is how often the background reconciler looks for
	// stuck operations (default 1s); ReconcileBackoff and
	// ReconcileMaxBackoff shape its retries (defaults 1s and 5m).
	ReconcileInterval, ReconcileBackoff, ReconcileMaxBackoff time.Duration
	// AuthCacheTTL is how long an authenticated key is remembered (default
	// DefaultAuthCacheTTL); revocations take up to this long to bite.
	AuthCacheTTL time.Duration
	// OpsPerMinute caps the operations each tenant may create per minute,
	// across all replicas (counted in the database); 0 means no quota.
	OpsPerMinute int
	// Retention is how long finished operations are kept (default 30 days);
	// PruneInterval is how often each replica prunes (default 1h).
	Retention, PruneInterval time.Duration
	// FinishedCacheSize is how many finished operations (SUCCEEDED, FAILED,
	// REJECTED, CANCELLED) this process remembers, so that a replayed
	// Execute of one is answered without a database round trip (default
	// 16384, about 2 KiB each; negative disables). A finished operation
	// never changes, so every replica may answer from its own copy.
	// Negative also turns off the copies of READY operations kept for the
	// Execute that follows (live.go).
	FinishedCacheSize int
	// FinishedCacheTTL bounds how long one is remembered (default 10m); an
	// entry never outlives the operation's retention either.
	FinishedCacheTTL time.Duration
	// OutcomeRetry is how long an executor keeps trying to record a
	// downstream's answer while the database is unreachable (default 1m):
	// the answer is known only to it, and lost it becomes an unknown outcome.
	OutcomeRetry time.Duration
	// ApprovalWebhook, when its URL is set, notifies of every operation
	// that starts awaiting approval (notify.go).
	ApprovalWebhook ApprovalWebhook
}

// FinishedCacheOff is Config.FinishedCacheSize turning the caches of
// finished and READY operations off (any negative value does; 0 is the
// default size).
const FinishedCacheOff = -1

// Defaults is every default of Config, written here and nowhere else:
// Config's zero fields take them (New), and the binary's flags
// (cmd/opledger) show and apply the same values. ServerID's default is a
// new random name per process.
func Defaults() Config {
	return Config{
		MinLease:            30 * time.Second,
		MaxWait:             30 * time.Second,
		WaitPoll:            500 * time.Millisecond,
		MaxArgsBytes:        64 << 10,
		ReconcileInterval:   time.Second,
		ReconcileBackoff:    time.Second,
		ReconcileMaxBackoff: 5 * time.Minute,
		AuthCacheTTL:        DefaultAuthCacheTTL,
		Retention:           30 * 24 * time.Hour,
		PruneInterval:       time.Hour,
		FinishedCacheSize:   16384,
		FinishedCacheTTL:    10 * time.Minute,
		OutcomeRetry:        time.Minute,
		ApprovalWebhook: ApprovalWebhook{Timeout: 10 * time.Second, Backoff: time.Second, MaxBackoff: 5 * time.Minute,
			MaxAge: 24 * time.Hour, Interval: time.Second},
	}
}

// defaults fills c's zero fields from Defaults.
func (c *Config) defaults() {
	d := Defaults()
	if c.ServerID == "" {
		c.ServerID = newID("srv_")
	}
	orDefault(&c.MinLease, d.MinLease)
	orDefault(&c.MaxWait, d.MaxWait)
	orDefault(&c.WaitPoll, d.WaitPoll)
	orDefault(&c.MaxArgsBytes, d.MaxArgsBytes)
	orDefault(&c.ReconcileInterval, d.ReconcileInterval)
	orDefault(&c.ReconcileBackoff, d.ReconcileBackoff)
	orDefault(&c.ReconcileMaxBackoff, d.ReconcileMaxBackoff)
	orDefault(&c.AuthCacheTTL, d.AuthCacheTTL)
	orDefault(&c.Retention, d.Retention)
	orDefault(&c.PruneInterval, d.PruneInterval)
	orDefault(&c.FinishedCacheSize, d.FinishedCacheSize)
	orDefault(&c.FinishedCacheTTL, d.FinishedCacheTTL)
	orDefault(&c.OutcomeRetry, d.OutcomeRetry)
	w, dw := &c.ApprovalWebhook, d.ApprovalWebhook
	orDefault(&w.Timeout, dw.Timeout)
	orDefault(&w.Backoff, dw.Backoff)
	orDefault(&w.MaxBackoff, dw.MaxBackoff)
	orDefault(&w.MaxAge, dw.MaxAge)
	orDefault(&w.Interval, dw.Interval)
}

// orDefault sets a zero setting to its default.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// bound is a tool with the executor that performs it, its settings with
// their defaults, and what the executor says its downstream guarantees.
type bound struct {
	tool     *tool.Tool
	settings executor.Settings
	exec     executor.Executor
	caps     executor.Capabilities
}

// Ledger is the execution ledger. It is safe for concurrent use, and any
// number of Ledgers (in any number of processes) may share one database.
type Ledger struct {
	cfg      Config
	store    *store.Store
	tools    *tool.Registry
	bound    map[string]bound // by name + "@" + version
	listener *store.Listener
	logger   *slog.Logger
	auth     authCache
	// maxLease is the lease a claim takes: the claim does not know the
	// operation's tool yet, so it takes the longest any tool needs.
	maxLease time.Duration
	// attempts counts the attempts in flight (WaitAttempts).
	attempts inflight
	// attemptSeq numbers this process's attempts, and ownerPrefix names
	// this process in their lease owners (leaseOwner).
	attemptSeq  atomic.Uint64
	ownerPrefix string

	// hooks are the interruption points and decorators of tests and of
	// the chaos build; nil in production.
	hooks *Hooks
	obs   Observer
	// stmts and sendFn are the statements (seams.go) and the downstream
	// call the ledger runs: the store's and callDownstream, unless hooks
	// decorate them.
	stmts  Statements
	sendFn SendFunc
	// shares batches the shares Prepares reserve apart from their insert in
	// one budget (admit).
	shares *shareGroups

	// finished remembers operations in a terminal state, by tenant and id,
	// with the form they are answered in (see SetEncoder): the one cache of
	// finished operations in the process.
	finished *cache.Map[opKey, finished]
	// live holds, by tenant and id, the READY operations this process
	// prepared or approved and no Execute has claimed yet (live.go), at
	// most maxLive, and none when FinishedCacheSize turns caching off.
	live *cache.Map[opKey, Operation]
	// encode computes an operation's answer form; nil keeps none.
	encode func(Operation) any

	// keys derives downstream keys with the configured secret.
	keys *keyDeriver
	// policyDigests are the digests of the policies in force on this
	// server, one per tool version: the claim sends only operations judged
	// under one of them.
	policyDigests []string

	// notifyKick wakes the approval notifier; notifyClient sends.
	notifyKick   chan struct{}
	notifyClient *http.Client
}

// Hooks are the ledger's interruption points and decorators: tests install
// them to pause it at a point or to watch a statement, and the chaos build
// (-tags failpoints) installs proof/failpoint's crash points and defect
// switches through them, so that the product names neither. Every field is
// optional; a ledger without hooks runs none.
type Hooks struct {
	// AfterPrepare runs when a Prepare's new operation is committed, before
	// the Prepare answers.
	AfterPrepare func(ctx context.Context, op Operation)
	// AfterDownstream runs after the downstream answered and before the
	// outcome is committed.
	AfterDownstream func(ctx context.Context, op Operation)
	// AfterCommit runs when an attempt's outcome is committed (op as
	// committed), before the Execute answers.
	AfterCommit func(ctx context.Context, op Operation)
	// BeforeApprovalExpiry runs when Execute found a READY operation it
	// could not claim and is about to expire its approval.
	BeforeApprovalExpiry func(ctx context.Context, op Operation)
	// Waiting runs when an Execute is about to sleep until another
	// attempt's outcome.
	Waiting func(ctx context.Context, op Operation)
	// PrepareConflict runs when a Prepare's insert was refused by an
	// operation already under its key, before the Prepare reads it.
	PrepareConflict func(ctx context.Context)

	// Statements, when set, decorates the store statements the ledger runs
	// through its seam (Statements): it is given the store's and returns
	// those the ledger runs.
	Statements func(Statements) Statements
	// Send, when set, decorates an attempt's call of its downstream: it is
	// given the ledger's (SendFunc) and returns the one the attempt makes.
	Send func(SendFunc) SendFunc
	// TakeOverUndeduped, when set, reports whether an Execute that found
	// op's lease expired takes it over and sends it again although its
	// downstream does not dedupe keys. Unset, it never does: nobody can
	// know whether the first attempt landed, so the outcome is unknown.
	// (The chaos build's takeover-nodedupe defect says yes, for its control
	// run.)
	TakeOverUndeduped func(op Operation) bool
}

// New returns a ledger over st for the tools in reg, calling each tool
// through the executor registry execs.
func New(cfg Config, st *store.Store, reg *tool.Registry, execs *executor.Registry, listener *store.Listener, logger *slog.Logger) (*Ledger, error) {
	cfg.defaults()
	if len(cfg.DownstreamSecret) < 16 {
		return nil, errors.New("ledger: the downstream secret must be at least 16 bytes")
	}
	l := &Ledger{cfg: cfg, store: st, tools: reg, bound: map[string]bound{}, listener: listener, logger: logger, obs: nopObserver{},
		keys:     newKeyDeriver(cfg.DownstreamSecret),
		finished: cache.New[opKey, finished](cfg.FinishedCacheSize), live: cache.New[opKey, Operation](min(cfg.FinishedCacheSize, maxLive)), notifyKick: make(chan struct{}, 1),
		notifyClient: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	l.auth.entries = map[keyHash]authEntry{}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	l.ownerPrefix = cfg.ServerID + "/" + hex.EncodeToString(nonce[:]) + "/"
	for _, t := range reg.List() {
		ex, err := execs.New(t.Executor.Type, t.Executor)
		if err != nil {
			return nil, fmt.Errorf("ledger: tool %s@%s: %w", t.Name, t.Version, err)
		}
		b := bound{tool: t, settings: t.Executor.WithDefaults(), exec: ex, caps: executor.CapabilitiesOf(ex)}
		l.bound[t.Name+"@"+t.Version] = b
		l.maxLease = max(l.maxLease, l.lease(b))
	}
	l.maxLease = max(l.maxLease, cfg.MinLease)
	l.policyDigests = policyDigests(reg)
	l.decorate(nil)
	l.shares = newShareGroups(func(ctx context.Context, lim *tool.Limit, rs []store.Reservation) ([]store.Share, error) {
		return l.stmts.BudgetReserveEach(ctx, &l.store.Conn, lim, rs)
	})
	return l, nil
}

// SetHooks installs hooks (nil removes them), before the ledger serves.
func (l *Ledger) SetHooks(h *Hooks) {
	l.hooks = h
	l.decorate(h)
}

// ServerID is this ledger's name in leases and events.
func (l *Ledger) ServerID() string { return l.cfg.ServerID }

func (l *Ledger) toolOf(op Operation) (bound, error) {
	b, ok := l.bound[op.Tool+"@"+op.ToolVersion]
	if !ok {
		return bound{}, refuse(opledgerv1.ErrorReason_ERROR_REASON_TOOL_VERSION_UNKNOWN,
			"tool %s version %s is no longer configured on this server", op.Tool, op.ToolVersion)
	}
	return b, nil
}

func (l *Ledger) lease(b bound) time.Duration {
	attempts, timeout := b.settings.MaxAttempts, b.settings.Timeout
	// Every attempt may run to its timeout, retries back off up to 2s each,
	// and the outcome must still be committed inside the lease.
	return max(l.cfg.MinLease, time.Duration(attempts)*timeout+time.Duration(attempts-1)*2*time.Second+time.Second)
}

func (l *Ledger) opLogger(op Operation) *slog.Logger {
	return l.logger.With("operation_id", op.ID, "tenant", op.Tenant, "tool", op.Tool,
		"attempt", op.Attempts, "fence", op.Fence)
}

// DatabaseNow is the database's clock, for a time rule a caller judges
// before anything is written (a webhook signature's age): replicas whose
// own clocks differ then decide alike.
func (l *Ledger) DatabaseNow(ctx context.Context) (time.Time, error) {
	now, err := l.store.ClockNow(ctx)
	if err != nil {
		return time.Time{}, storeErr(err)
	}
	return now, nil
}

// ApprovalEntry is one decision of an operation's current approval round.
type ApprovalEntry = store.ApprovalEntry

// ApprovalsOf decodes an operation's stored approvals (Operation.Approvals);
// a list that does not decode (none is ever written so) reads as none.
func ApprovalsOf(b []byte) []ApprovalEntry {
	if len(b) < 3 { // "[]"
		return nil
	}
	var entries []ApprovalEntry
	if json.Unmarshal(b, &entries) != nil {
		return nil
	}
	return entries
}
