// Package ledger is opledger's execution ledger: the operation state machine
// and the rules of Prepare, Approve, Execute, Get and Reconcile, on top of
// the store. It decides; the store enforces with guarded statements; the
// server translates.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/cache"
	"github.com/opledger/opledger/clients/go/fingerprint"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/failpoint"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// Operation is a ledger row as the ledger hands it out.
type Operation = store.Operation

// OperationEvent is one entry of an operation's event log.
type OperationEvent = store.Event

// The roles a principal may hold.
const (
	RoleAgent    = "agent"
	RoleApprover = "approver"
	RoleOperator = "operator"
)

// Roles lists every role.
var Roles = []string{RoleAgent, RoleApprover, RoleOperator}

// Actor is the authenticated principal on whose behalf the ledger acts.
type Actor struct {
	ID, Tenant, Name string
	Roles            []string
}

func (a Actor) has(role string) bool { return slices.Contains(a.Roles, role) }

// DefaultAuthCacheTTL is Config.AuthCacheTTL's default: how long a replica
// may keep accepting a key after it was revoked.
const DefaultAuthCacheTTL = 30 * time.Second

// Config tunes the ledger. Zero values take the defaults noted.
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

func (c *Config) defaults() {
	if c.ServerID == "" {
		c.ServerID = newID("srv_")
	}
	if c.MinLease == 0 {
		c.MinLease = 30 * time.Second
	}
	if c.MaxWait == 0 {
		c.MaxWait = 30 * time.Second
	}
	if c.MaxArgsBytes == 0 {
		c.MaxArgsBytes = 64 << 10
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = time.Second
	}
	if c.ReconcileBackoff == 0 {
		c.ReconcileBackoff = time.Second
	}
	if c.ReconcileMaxBackoff == 0 {
		c.ReconcileMaxBackoff = 5 * time.Minute
	}
	if c.AuthCacheTTL == 0 {
		c.AuthCacheTTL = DefaultAuthCacheTTL
	}
	if c.Retention == 0 {
		c.Retention = 30 * 24 * time.Hour
	}
	if c.PruneInterval == 0 {
		c.PruneInterval = time.Hour
	}
	if c.FinishedCacheSize == 0 {
		c.FinishedCacheSize = 16384
	}
	if c.FinishedCacheTTL == 0 {
		c.FinishedCacheTTL = 10 * time.Minute
	}
	if c.OutcomeRetry == 0 {
		c.OutcomeRetry = time.Minute
	}
	c.ApprovalWebhook.defaults()
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

	// hooks are test-only interruption points; nil in production.
	hooks *Hooks
	obs   Observer

	// finished remembers operations in a terminal state, by tenant and id,
	// with the form they are answered in (see SetEncoder): the one cache of
	// finished operations in the process.
	finished *cache.Map[opKey, finished]
	// encode computes an operation's answer form; nil keeps none.
	encode func(Operation) any

	// notifyKick wakes the approval notifier; notifyClient sends.
	notifyKick   chan struct{}
	notifyClient *http.Client
}

type opKey struct{ tenant, id string }

// finished is a cached finished operation and its answer form.
type finished struct {
	op      Operation
	encoded any
}

// SetEncoder installs the function that computes the form in which an
// operation is answered (the server's wire encoding). The finished-
// operation cache keeps that form with the operation, so a replay is
// answered without encoding it again. Call it before serving.
func (l *Ledger) SetEncoder(encode func(Operation) any) { l.encode = encode }

// Encoded returns the answer form of op kept in the finished-operation
// cache, or nil when the cache holds no such copy of op.
func (l *Ledger) Encoded(op Operation) any {
	f, ok := l.finished.Get(opKey{op.Tenant, op.ID})
	if !ok || !f.op.UpdatedAt.Equal(op.UpdatedAt) {
		return nil
	}
	return f.encoded
}

// remember caches op if it is finished: nothing can change it any more
// (the state machine has no edge out of a terminal state), until the pruner
// deletes it, which the entry's deadline anticipates.
func (l *Ledger) remember(op Operation) {
	if !State(op.State).Terminal() {
		return
	}
	// Every Get of a finished operation comes here: a copy already held
	// is the same operation, so only a missing one takes the write lock.
	key := opKey{op.Tenant, op.ID}
	if _, ok := l.finished.Get(key); ok {
		return
	}
	// The pruner deletes it once its age passes the retention, on the
	// database's clock: the copy goes no later, whatever this process's
	// clock says.
	if op.DBNow.IsZero() {
		return
	}
	ttl := min(l.cfg.FinishedCacheTTL, op.UpdatedAt.Add(l.cfg.Retention).Sub(op.DBNow))
	if ttl <= 0 {
		return
	}
	f := finished{op: op}
	if l.encode != nil {
		f.encoded = l.encode(op)
	}
	l.finished.Put(key, f, time.Now().Add(ttl))
}

// Hooks lets tests pause or crash the ledger at named points.
type Hooks struct {
	// AfterDownstream runs after the downstream answered and before the
	// outcome is committed.
	AfterDownstream func(ctx context.Context, op Operation)
	// BeforeApprovalExpiry runs when Execute found a READY operation it
	// could not claim and is about to expire its approval.
	BeforeApprovalExpiry func(ctx context.Context, op Operation)
}

// New returns a ledger over st for the tools in reg, calling each tool
// through the executor registry execs.
func New(cfg Config, st *store.Store, reg *tool.Registry, execs *executor.Registry, listener *store.Listener, logger *slog.Logger) (*Ledger, error) {
	cfg.defaults()
	if len(cfg.DownstreamSecret) < 16 {
		return nil, errors.New("ledger: the downstream secret must be at least 16 bytes")
	}
	l := &Ledger{cfg: cfg, store: st, tools: reg, bound: map[string]bound{}, listener: listener, logger: logger, obs: nopObserver{},
		finished: cache.New[opKey, finished](cfg.FinishedCacheSize), notifyKick: make(chan struct{}, 1),
		notifyClient: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	l.auth.entries = map[string]authEntry{}
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
	return l, nil
}

// SetHooks installs test hooks.
func (l *Ledger) SetHooks(h *Hooks) { l.hooks = h }

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

// maxListedTools bounds the names an unknown-tool error lists.
const maxListedTools = 20

// ResolveTool returns the tool a Prepare names, resolving an empty version to
// the current one.
func (l *Ledger) ResolveTool(name, version string) (*tool.Tool, error) {
	t, err := l.tools.Lookup(name, version)
	switch {
	case errors.Is(err, tool.ErrUnknownTool):
		return nil, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_TOOL_UNKNOWN, Field: "tool",
			Message: fmt.Sprintf("no tool named %q is configured; configured tools: %s (ListTools describes them)",
				name, l.tools.Names(maxListedTools))}
	case errors.Is(err, tool.ErrUnknownVersion):
		return nil, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_TOOL_VERSION_UNKNOWN, Field: "tool_version",
			Message: fmt.Sprintf("tool %q has no version %q; its versions: %s (leave tool_version empty for the current one)",
				name, version, l.tools.Versions(name, maxListedTools))}
	case err != nil:
		return nil, err
	}
	return t, nil
}

// PrepareInput is a Prepare request after authentication.
type PrepareInput struct {
	Tool, ToolVersion string
	// Args is passed as the Struct itself: AsMap would turn NaN into the
	// string "NaN" and so collide with a real string.
	Args *structpb.Struct
	// IdempotencyKey is the caller's key, and KeyDigest its digest for
	// logs and the event log (computed when empty).
	IdempotencyKey, KeyDigest string
	// Method is the full gRPC method, part of the fingerprint.
	Method string
}

// Prepare records the operation, or returns the one already recorded under
// the same (tenant, tool, key) when the fingerprints match. Validation
// happens before anything is written, so a refused request reserves nothing.
func (l *Ledger) Prepare(ctx context.Context, a Actor, in PrepareInput) (Operation, bool, error) {
	t, err := l.ResolveTool(in.Tool, in.ToolVersion)
	if err != nil {
		return Operation{}, false, err
	}
	if in.Args == nil {
		in.Args = &structpb.Struct{}
	}
	canonical, err := fingerprint.Canonicalize(in.Args)
	if err != nil {
		return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: "args", Message: err.Error()}
	}
	if len(canonical) > l.cfg.MaxArgsBytes {
		return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_TOO_LARGE, Field: "args",
			Message: fmt.Sprintf("args are %d bytes in canonical form; at most %d are allowed", len(canonical), l.cfg.MaxArgsBytes)}
	}
	if err := t.ValidateArgs(in.Args); err != nil {
		le := &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: "args",
			Message: fmt.Sprintf("args do not match the schema of %s@%s", t.Name, t.Version)}
		var ae *tool.ArgsError
		if errors.As(err, &ae) {
			for _, v := range ae.Violations {
				le.Violations = append(le.Violations, Violation{Field: "args" + v.Field, Description: v.Description})
			}
		} else {
			le.Violations = []Violation{{Field: "args", Description: err.Error()}}
		}
		return Operation{}, false, le
	}
	// The fingerprint covers the canonical bytes just produced: the args are
	// canonicalised once per Prepare.
	fp, err := fingerprint.OfCanonical(in.Method, a.Tenant, t.Name, t.Version, canonical)
	if err != nil {
		return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: "args", Message: err.Error()}
	}
	if in.KeyDigest == "" {
		in.KeyDigest = digest(in.IdempotencyKey)
	}
	state := StateReady
	if t.Approval.Required {
		state = StateAwaitingApproval
	}
	if err := Check("", EventPrepared, state); err != nil {
		return Operation{}, false, storeErr(err)
	}
	id := newID("op_")
	op, inserted, err := l.insert(ctx, a.Tenant, store.NewOperation{
		ID: id, Tenant: a.Tenant, Tool: t.Name, ToolVersion: t.Version, IdempotencyKey: in.IdempotencyKey,
		Args: canonical, Fingerprint: fp, State: string(state), PreparedBy: a.ID,
		ApprovalRequired: t.Approval.Required, ApprovalTTL: t.Approval.TTL,
		DownstreamKey: DownstreamKey(l.cfg.DownstreamSecret, a.Tenant, t.Name, in.IdempotencyKey, fp),
		Actor:         a.Name, Detail: "prepared with key digest " + in.KeyDigest,
		Notify: l.notifyOn(),
	})
	if err != nil {
		return Operation{}, false, storeErr(err)
	}
	if inserted {
		failpoint.Inject(failpoint.AfterPrepare)
		if state == StateAwaitingApproval && l.notifyOn() {
			l.kickNotifier()
		}
		return op, false, nil
	}
	existing, err := l.store.OperationGetByKey(ctx, a.Tenant, t.Name, in.IdempotencyKey)
	if err != nil {
		// The row that refused our insert is committed, so this is a real
		// failure to read, not a race.
		return Operation{}, false, storeErr(err)
	}
	if existing.Fingerprint == fp {
		l.obs.DuplicatePrevented("Prepare", t.Name, true)
		l.remember(existing)
	}
	if existing.Fingerprint != fp {
		return Operation{}, false, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_REUSED,
			Message:  "this idempotency key was already used for a different request (args, tool version or method differ); use a new key for a new operation",
			Metadata: map[string]string{"operation_id": existing.ID}}
	}
	return existing, true, nil
}

// Get returns an operation of the actor's tenant and, when asked, its
// events.
func (l *Ledger) Get(ctx context.Context, a Actor, id string, withEvents bool) (Operation, []OperationEvent, error) {
	op, err := l.store.OperationGet(ctx, a.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return Operation{}, nil, notFound(id)
	}
	if err != nil {
		return Operation{}, nil, storeErr(err)
	}
	l.remember(op)
	if !withEvents {
		return op, nil, nil
	}
	evs, err := l.store.OperationEvents(ctx, op.ID)
	if err != nil {
		return Operation{}, nil, storeErr(err)
	}
	return op, evs, nil
}

// authCache keeps recently authenticated keys off the database's hot path.
type authCache struct {
	mu      sync.Mutex
	entries map[string]authEntry
}

type authEntry struct {
	actor   Actor
	ok      bool
	expires time.Time
}

// ErrBadKey is returned by Authenticate for unknown or revoked keys.
var ErrBadKey = errors.New("ledger: unknown or revoked API key")

// Authenticate resolves an API key to its actor. Results (including
// refusals, briefly) are cached per key hash.
func (l *Ledger) Authenticate(ctx context.Context, key string) (Actor, error) {
	h := HashAPIKey(key)
	hk := string(h)
	now := time.Now()
	l.auth.mu.Lock()
	e, hit := l.auth.entries[hk]
	l.auth.mu.Unlock()
	if hit && now.Before(e.expires) {
		if !e.ok {
			return Actor{}, ErrBadKey
		}
		return e.actor, nil
	}
	p, err := l.store.PrincipalByKeyHash(ctx, h)
	var entry authEntry
	switch {
	case errors.Is(err, store.ErrNotFound):
		entry = authEntry{ok: false, expires: now.Add(2 * time.Second)}
	case err != nil:
		return Actor{}, storeErr(err)
	default:
		entry = authEntry{actor: Actor{ID: p.ID, Tenant: p.Tenant, Name: p.Name, Roles: p.Roles}, ok: true, expires: now.Add(l.cfg.AuthCacheTTL)}
	}
	l.auth.mu.Lock()
	if len(l.auth.entries) > 10000 {
		l.auth.entries = map[string]authEntry{}
	}
	l.auth.entries[hk] = entry
	l.auth.mu.Unlock()
	if !entry.ok {
		return Actor{}, ErrBadKey
	}
	return entry.actor, nil
}

// Principal is an API key's owner.
type Principal = store.Principal

// CreatePrincipal creates a principal and returns its new API key, which is
// shown once and never stored.
func CreatePrincipal(ctx context.Context, st *store.Store, tenant, name string, roles []string) (key string, p Principal, err error) {
	if tenant == "" || len(tenant) > 64 {
		return "", p, errors.New("ledger: tenant must be 1 to 64 characters")
	}
	if len(roles) == 0 {
		return "", p, errors.New("ledger: at least one role is needed")
	}
	for _, r := range roles {
		if !slices.Contains(Roles, r) {
			return "", p, fmt.Errorf("ledger: unknown role %q (want agent, approver or operator)", r)
		}
	}
	key, hash, prefix := NewAPIKey()
	id := newID("pr_")
	if name == "" {
		name = id
	}
	p, err = st.PrincipalCreate(ctx, store.Principal{ID: id, Tenant: tenant, Name: name, Roles: roles, KeyPrefix: prefix}, hash)
	if errors.Is(err, store.ErrAlreadyExists) {
		return "", p, fmt.Errorf("ledger: tenant %q already has a principal named %q", tenant, name)
	}
	return key, p, err
}

// ListPrincipals returns a tenant's principals, revoked ones included,
// oldest first. Keys are never stored, so none can be listed.
func ListPrincipals(ctx context.Context, st *store.Store, tenant string) ([]Principal, error) {
	if tenant == "" {
		return nil, errors.New("ledger: a tenant is required")
	}
	return st.PrincipalList(ctx, tenant)
}

// RevokePrincipal revokes the key of the tenant's principal ref names (by
// ID or by Name). Revoking twice is harmless: already reports that the key
// was revoked before, at p.RevokedAt. Servers stop accepting the key within
// their auth cache TTL.
func RevokePrincipal(ctx context.Context, st *store.Store, tenant string, ref store.PrincipalRef) (p Principal, already bool, err error) {
	if tenant == "" {
		return p, false, errors.New("ledger: a tenant is required")
	}
	if (ref.ID == "") == (ref.Name == "") {
		return p, false, errors.New("ledger: name the principal by its id or by its name, not both")
	}
	p, err = st.PrincipalRevoke(ctx, tenant, ref)
	if !errors.Is(err, store.ErrNotFound) {
		return p, false, err
	}
	p, err = st.PrincipalGet(ctx, tenant, ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		what := "named " + strconv.Quote(ref.Name)
		if ref.ID != "" {
			what = "with id " + strconv.Quote(ref.ID)
		}
		return p, false, fmt.Errorf("ledger: tenant %q has no principal %s", tenant, what)
	case err != nil:
		return p, false, err
	case p.RevokedAt.IsZero():
		// Nothing clears revoked_at, so an unrevoked row here was created
		// under this name after the UPDATE looked: report it, do not guess.
		return p, false, fmt.Errorf("ledger: principal %s changed while revoking; run the command again", p.ID)
	}
	return p, true, nil
}

// insert stores a new operation. With a quota it does so in a transaction
// that also counts the tenant's operations this minute, so an operation over
// the quota is rolled back and nothing is stored.
func (l *Ledger) insert(ctx context.Context, tenant string, n store.NewOperation) (Operation, bool, error) {
	if l.cfg.OpsPerMinute <= 0 {
		return l.store.OperationInsert(ctx, n)
	}
	var op Operation
	var inserted bool
	err := l.store.InTx(ctx, func(c *store.Conn) error {
		var err error
		op, inserted, err = c.OperationInsert(ctx, n)
		if err != nil || !inserted {
			return err
		}
		count, err := c.TenantUsageBump(ctx, tenant)
		if err != nil {
			return err
		}
		if int(count) > l.cfg.OpsPerMinute {
			return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_QUOTA_EXCEEDED,
				Message:    fmt.Sprintf("this tenant may create %d operations per minute; nothing was stored", l.cfg.OpsPerMinute),
				RetryAfter: time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)) + 100*time.Millisecond}
		}
		return nil
	})
	return op, inserted, err
}

// RunPruner deletes finished operations older than the retention until ctx
// ends. Every replica may run it: batches skip rows another replica holds.
// Open and OUTCOME_UNKNOWN operations are never pruned. A key whose
// operation was pruned is free again: reusing it starts a new operation.
func (l *Ledger) RunPruner(ctx context.Context) {
	t := time.NewTicker(l.cfg.PruneInterval)
	defer t.Stop()
	for {
		if n, err := l.Prune(ctx); err != nil {
			l.logger.Warn("pruner: failed", "error", err)
		} else if n > 0 {
			l.logger.Info("pruner: deleted finished operations", "count", n, "retention", l.cfg.Retention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Prune deletes every finished operation older than the retention, in
// batches, and returns how many it deleted.
func (l *Ledger) Prune(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		n, err := l.store.OperationPrune(ctx, l.cfg.Retention, 1000)
		if err != nil {
			return total, err
		}
		total += n
		if n < 1000 {
			break
		}
	}
	_, err := l.store.TenantUsagePrune(ctx)
	return total, err
}

// Retention is how long finished operations are kept.
func (l *Ledger) Retention() time.Duration { return l.cfg.Retention }
