package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/opledger/opledger/audit"
	"github.com/opledger/opledger/store/internal/db"
)

// Operation is one row of the ledger, in plain Go types. Zero times and empty
// strings stand for NULL.
type Operation struct {
	ID, Tenant, Tool, ToolVersion string
	// IdempotencyKey is the caller's raw key. Never log it.
	IdempotencyKey string
	// Args is the JSON object as prepared.
	Args                []byte
	Fingerprint         string
	State               string
	PreparedBy          string
	ApprovalRequired    bool
	ApprovalTTL         time.Duration
	ApprovalDecision    string
	ApprovalDecidedBy   string
	ApprovalDecidedAt   time.Time
	ApprovalExpiresAt   time.Time
	ApprovalFingerprint string
	ApprovalReason      string
	// ApprovalsNeeded is the quorum the policy demanded; 0 without approval.
	ApprovalsNeeded int32
	// Approvals is the current round's decisions, a JSON array of
	// ApprovalEntry.
	Approvals []byte
	// PolicyDigest is the digest of the policy the operation was last judged
	// under, ApprovalRule the rule that demanded its approval.
	PolicyDigest, ApprovalRule string
	// Supersedes and SupersededBy link an edited operation and its edit.
	Supersedes, SupersededBy string
	// BudgetNames and BudgetScopes (parallel) are the budgets the
	// operation counts against; Identity its business identity, if its
	// tool declares one.
	BudgetNames, BudgetScopes []string
	Identity                  string
	Attempts                  int32
	Fence                     int64
	LeaseOwner                string
	LeaseExpiresAt            time.Time
	FirstClaimedAt            time.Time
	// FirstSentFence is the fence of the first attempt that may have reached
	// the downstream; 0 while nothing may have been sent.
	FirstSentFence int64
	// Waited says an Execute waits for the current attempt's outcome, so the
	// statement recording it notifies (OperationMarkWaited).
	Waited        bool
	DownstreamKey string
	ExternalRef   string
	// Result and Error are JSON documents, or nil.
	Result, Error     []byte
	ReconcileAttempts int32
	NextReconcileAt   time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
	// Events counts the operation's events. Every statement of
	// store/queries that changes a column of Operation other than waited,
	// reconcile_attempts and next_reconcile_at bumps it
	// (TestEveryChangeBumpsEvents), so a row whose Events is one behind a
	// transition's or a claim's is the version that statement changed
	// (TransitionParams.Base, Claim.Base). The trigger's prev_state changes with every update
	// and is not a field here for that reason.
	Events int32
	// DBNow is the database's clock when the row was read or written: every
	// time rule is judged against it, never against this process's clock.
	// Zero when the statement did not report it.
	DBNow time.Time
}

// LeaseExpired reports whether the lease of an EXECUTING operation had
// expired on the database's clock when the row was read.
func (o Operation) LeaseExpired() bool { return !o.DBNow.IsZero() && !o.LeaseExpiresAt.After(o.DBNow) }

// LeaseRemaining is how much of the lease was left on the database's clock
// when the row was read.
func (o Operation) LeaseRemaining() time.Duration { return o.LeaseExpiresAt.Sub(o.DBNow) }

// SinceFirstClaim is how long before the read the operation was first
// claimed, on the database's clock; 0 if it never was.
func (o Operation) SinceFirstClaim() time.Duration {
	if o.FirstClaimedAt.IsZero() {
		return 0
	}
	return o.DBNow.Sub(o.FirstClaimedAt)
}

// Event is one entry of an operation's event log.
type Event struct {
	OperationID string
	Seq         int32
	Type        string
	Actor       string
	FromState   string
	ToState     string
	Attempt     int32
	Fence       int64
	Detail      string
	CreatedAt   time.Time
}

func fromDB(r db.Operation) Operation {
	return Operation{
		ID: r.ID, Tenant: r.Tenant, Tool: r.Tool, ToolVersion: r.ToolVersion, IdempotencyKey: r.IdempotencyKey,
		Args: r.Args, Fingerprint: r.Fingerprint, State: r.State, PreparedBy: r.PreparedBy,
		ApprovalRequired: r.ApprovalRequired, ApprovalTTL: time.Duration(r.ApprovalTtlMs) * time.Millisecond,
		ApprovalDecision: r.ApprovalDecision.String, ApprovalDecidedBy: r.ApprovalDecidedBy.String,
		ApprovalDecidedAt: r.ApprovalDecidedAt.Time, ApprovalExpiresAt: r.ApprovalExpiresAt.Time,
		ApprovalFingerprint: r.ApprovalFingerprint.String, ApprovalReason: r.ApprovalReason.String,
		Attempts: r.Attempts, Fence: r.Fence, LeaseOwner: r.LeaseOwner.String, LeaseExpiresAt: r.LeaseExpiresAt.Time,
		FirstClaimedAt: r.FirstClaimedAt.Time, FirstSentFence: r.FirstSentFence.Int64, Waited: r.Waited,
		DownstreamKey: r.DownstreamKey, ExternalRef: r.ExternalRef.String, Result: r.Result, Error: r.Error,
		ReconcileAttempts: r.ReconcileAttempts, NextReconcileAt: r.NextReconcileAt.Time,
		CreatedAt: r.CreatedAt.Time, UpdatedAt: r.UpdatedAt.Time, Events: r.Events,
		ApprovalsNeeded: r.ApprovalsNeeded, Approvals: r.Approvals, PolicyDigest: r.PolicyDigest, ApprovalRule: r.ApprovalRule,
		Supersedes: r.Supersedes.String, SupersededBy: r.SupersededBy.String,
		BudgetNames: r.BudgetNames, BudgetScopes: r.BudgetScopes, Identity: r.Identity.String,
	}
}

// ApprovalEntry is one decision of Operation.Approvals, as stored.
type ApprovalEntry struct {
	PrincipalID   string    `json:"principal_id"`
	PrincipalName string    `json:"principal_name"`
	Decision      string    `json:"decision"`
	DecidedAt     time.Time `json:"decided_at"`
	Fingerprint   string    `json:"fingerprint"`
	Reason        string    `json:"reason"`
	PolicyDigest  string    `json:"policy_digest"`
}

// withNow converts a row that carries the database's clock.
// claimedRow is OperationClaim's row (its UNION of the claimed and the
// unclaimed operation, which sqlc.embed cannot name) as an Operation: the
// one place a row's columns are copied field by field.
// TestClaimRowCarriesEveryColumn fails when the operation table gains a
// column this does not copy.
func claimedRow(r db.OperationClaimRow) Operation {
	return withNow(db.Operation{ID: r.ID, Tenant: r.Tenant, Tool: r.Tool, ToolVersion: r.ToolVersion, IdempotencyKey: r.IdempotencyKey,
		Args: r.Args, Fingerprint: r.Fingerprint, State: r.State, PreparedBy: r.PreparedBy, ApprovalRequired: r.ApprovalRequired,
		ApprovalTtlMs: r.ApprovalTtlMs, ApprovalDecision: r.ApprovalDecision, ApprovalDecidedBy: r.ApprovalDecidedBy,
		ApprovalDecidedAt: r.ApprovalDecidedAt, ApprovalExpiresAt: r.ApprovalExpiresAt, ApprovalFingerprint: r.ApprovalFingerprint,
		ApprovalReason: r.ApprovalReason, Attempts: r.Attempts, Fence: r.Fence, LeaseOwner: r.LeaseOwner, LeaseExpiresAt: r.LeaseExpiresAt,
		FirstClaimedAt: r.FirstClaimedAt, DownstreamKey: r.DownstreamKey, ExternalRef: r.ExternalRef, Result: r.Result, Error: r.Error,
		Events: r.Events, ReconcileAttempts: r.ReconcileAttempts, NextReconcileAt: r.NextReconcileAt, CreatedAt: r.CreatedAt,
		UpdatedAt: r.UpdatedAt, FirstSentFence: r.FirstSentFence, Waited: r.Waited, ApprovalsNeeded: r.ApprovalsNeeded,
		Approvals: r.Approvals, PolicyDigest: r.PolicyDigest, ApprovalRule: r.ApprovalRule, Supersedes: r.Supersedes,
		SupersededBy: r.SupersededBy, BudgetNames: r.BudgetNames, BudgetScopes: r.BudgetScopes, Identity: r.Identity}, r.DbNow)
}

func withNow(r db.Operation, now pgtype.Timestamptz) Operation {
	op := fromDB(r)
	op.DBNow = now.Time
	return op
}

// wrote marks a row a statement just wrote with the database's clock: the
// statement set updated_at to its now().
func wrote(op Operation, err error) (Operation, error) {
	op.DBNow = op.UpdatedAt
	return op, err
}

func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// one maps a single-row result, turning "no row" into ErrNotFound.
func one[R any](r R, err error, conv func(R) db.Operation) (Operation, error) {
	if err != nil {
		return Operation{}, interpretError(err)
	}
	return fromDB(conv(r)), nil
}

// oneGuarded is one for a guarded statement: "no row" is its guard's
// refusal (ErrConditionFailed).
func oneGuarded[R any](statement string, r R, err error, conv func(R) db.Operation) (Operation, error) {
	if err != nil {
		return Operation{}, guarded(statement, err)
	}
	return fromDB(conv(r)), nil
}

// NewOperation is what Prepare inserts.
type NewOperation struct {
	ID, Tenant, Tool, ToolVersion, IdempotencyKey string
	Args                                          []byte
	// ArgsCanonical says Args are already in RFC 8785 form (Prepare's): the
	// PREPARED event's args digest is then their SHA-256, without
	// canonicalising them a second time (the same digest, since the form is
	// its own canonical form).
	ArgsCanonical                  bool
	Fingerprint, State, PreparedBy string
	ApprovalRequired               bool
	ApprovalTTL                    time.Duration
	DownstreamKey                  string
	// ApprovalsNeeded, PolicyDigest and ApprovalRule are the policy's
	// judgement of the new operation.
	ApprovalsNeeded            int32
	PolicyDigest, ApprovalRule string
	// Approvals, when not empty (a JSON array of one ApprovalEntry), is the
	// approval the operation is born with: an edit's, by its editor, who is
	// ApprovedBy with ApprovedReason; Supersedes is the edited operation.
	Approvals                              []byte
	Supersedes, ApprovedBy, ApprovedReason string
	// BudgetNames, BudgetScopes and Identity are what the operation
	// reserved (BudgetReserve; IdentityReserve, or TakeIdentity). With TakeIdentity the
	// insert takes Identity itself, for IdentityWindow after the operation
	// takes effect, and inserts nothing when another operation holds it
	// (IdentityGet says which).
	BudgetNames, BudgetScopes []string
	Identity                  string
	TakeIdentity              bool
	IdentityWindow            time.Duration
	// Reserve, when set, is the share the insert reserves itself
	// (OperationInsertReserving): the one limit of a tool whose only limit
	// is per key, whose name and scope BudgetNames and BudgetScopes repeat.
	// The operation is stored with it or nothing is (ErrSharesDoNotFit when
	// it does not fit as its budget stands).
	Reserve *Reservation
	// Actor and Detail describe the PREPARED event.
	Actor, Detail string
	// Notify queues an approval notification with an operation that
	// awaits approval.
	Notify bool
	// Claim, when set, claims the new operation for Lease in the same
	// statement (the one-call path), if it is born in Claim.From and needs
	// no approval; the row then reports the claim (fence 1).
	Claim *Claim
	Lease Lease
}

// OperationInsert inserts the operation with its PREPARED event unless its
// (tenant, tool, idempotency key) is taken, in which case it returns
// inserted == false and the caller reads the existing one.
func (c *Conn) OperationInsert(ctx context.Context, n NewOperation) (op Operation, inserted bool, err error) {
	// PREPARED's facts: what the operation is (docs/audit.md).
	var argsDigest string
	if n.ArgsCanonical && !c.noReceipts {
		sum := sha256.Sum256(n.Args)
		argsDigest = hex.EncodeToString(sum[:])
	} else {
		argsDigest, err = c.digest(n.Args)
	}
	if err != nil {
		return Operation{}, false, fmt.Errorf("store: operation %s: %w", n.ID, err)
	}
	prepared, facts, err := c.eventDoc(n.ID, "PREPARED", n.Actor, n.State, n.Detail, []audit.Fact{
		str("approvals_needed", itoa(n.ApprovalsNeeded)), opt("approver", n.ApprovedBy), str("args_digest", argsDigest),
		str("downstream_key", n.DownstreamKey), str("fingerprint", n.Fingerprint), str("policy_digest", n.PolicyDigest),
		str("prepared_by", n.PreparedBy), opt("reason", n.ApprovedReason), opt("supersedes", n.Supersedes),
		str("tenant", n.Tenant), str("tool", n.Tool), str("tool_version", n.ToolVersion),
	})
	if err != nil {
		return Operation{}, false, err
	}
	p := db.OperationInsertParams{PreparedDoc: prepared, PreparedFacts: facts,
		ID: n.ID, Tenant: n.Tenant, Tool: n.Tool, ToolVersion: n.ToolVersion, IdempotencyKey: n.IdempotencyKey,
		Args: n.Args, Fingerprint: n.Fingerprint, State: n.State, PreparedBy: n.PreparedBy,
		ApprovalRequired: n.ApprovalRequired, ApprovalTtlMs: n.ApprovalTTL.Milliseconds(),
		DownstreamKey: n.DownstreamKey, Actor: n.Actor, Detail: n.Detail, Notify: n.Notify,
		ApprovalsNeeded: n.ApprovalsNeeded, PolicyDigest: n.PolicyDigest, ApprovalRule: n.ApprovalRule,
		Approvals: n.approvals(), Supersedes: text(n.Supersedes), ApprovedBy: text(n.ApprovedBy), ApprovedReason: text(n.ApprovedReason),
		BudgetNames: n.BudgetNames, BudgetScopes: n.BudgetScopes, Identity: text(n.Identity),
		TakeIdentity: n.TakeIdentity, IdentityWindowSeconds: n.IdentityWindow.Seconds(),
	}
	if n.Claim != nil {
		p.Claim, p.ClaimFrom, p.ClaimTo, p.ClaimEvent = true, n.Claim.From, n.Claim.To, n.Claim.Event
		p.LeaseOwner, p.LeaseSeconds = text(n.Lease.Owner), n.Lease.Duration.Seconds()
		if p.ClaimedDoc, _, err = c.eventDoc(n.ID, n.Claim.Event, n.Actor, n.Claim.To, "", nil); err != nil {
			return Operation{}, false, err
		}
	}
	var r db.OperationInsertRow
	if n.Reserve != nil {
		r, err = c.operationInsertReserving(ctx, p, *n.Reserve)
	} else {
		r, err = c.q.OperationInsert(ctx, c.dbtx, p)
	}
	if err = interpretError(err); errors.Is(err, ErrNotFound) || errors.Is(err, errKeyTaken) {
		return Operation{}, false, nil
	}
	if err != nil {
		return Operation{}, false, err
	}
	return n.row(r), true, nil
}

// operationInsertReserving runs OperationInsertReserving with p's values
// and the share.
func (c *Conn) operationInsertReserving(ctx context.Context, p db.OperationInsertParams, share Reservation) (db.OperationInsertRow, error) {
	q := db.OperationInsertReservingParams{
		Tenant: p.Tenant, Tool: p.Tool, Identity: p.Identity, ID: p.ID, IdempotencyKey: p.IdempotencyKey,
		IdentityWindowSeconds: p.IdentityWindowSeconds, TakeIdentity: p.TakeIdentity, MaxUses: int32(share.MaxUses),
		BudgetName: share.Name, BudgetScope: share.Scope, Amount: share.Amount, ShareWindow: share.Window.Seconds(),
		MaxCount: int32(share.MaxCount), HasSum: share.HasSum, MaxSum: share.MaxSum,
		ToolVersion: p.ToolVersion, Args: p.Args, Fingerprint: p.Fingerprint, Claim: p.Claim, ClaimTo: p.ClaimTo, State: p.State,
		PreparedBy: p.PreparedBy, ApprovalRequired: p.ApprovalRequired, ApprovalTtlMs: p.ApprovalTtlMs, DownstreamKey: p.DownstreamKey,
		PreparedDoc: p.PreparedDoc, ClaimedDoc: p.ClaimedDoc, ClaimFrom: p.ClaimFrom, LeaseOwner: p.LeaseOwner, LeaseSeconds: p.LeaseSeconds,
		ApprovalsNeeded: p.ApprovalsNeeded, PolicyDigest: p.PolicyDigest, ApprovalRule: p.ApprovalRule, Approvals: p.Approvals,
		Supersedes: p.Supersedes, ApprovedBy: p.ApprovedBy, ApprovedReason: p.ApprovedReason, Actor: p.Actor, Detail: p.Detail,
		PreparedFacts: p.PreparedFacts, ClaimEvent: p.ClaimEvent, Notify: p.Notify,
	}
	r, err := c.q.OperationInsertReserving(ctx, c.dbtx, q)
	return db.OperationInsertRow(r), err
}

func (n NewOperation) approvals() []byte {
	if len(n.Approvals) == 0 {
		return []byte("[]")
	}
	return n.Approvals
}

// row is the operation OperationInsert stored: what the caller gave it, the
// statement's constants, and the three columns it returns (finding 31 of
// docs/performance.md: every column a statement returns costs PostgreSQL a
// catalog lookup per plan node on every execution, so the writes return only
// what the caller cannot know). TestWrittenRowIsTheStoredRow holds it to a
// read of the row.
func (n NewOperation) row(r db.OperationInsertRow) Operation {
	now := r.CreatedAt.Time
	op := Operation{
		ID: n.ID, Tenant: n.Tenant, Tool: n.Tool, ToolVersion: n.ToolVersion, IdempotencyKey: n.IdempotencyKey,
		Args: r.Args, Fingerprint: n.Fingerprint, State: n.State, PreparedBy: n.PreparedBy,
		ApprovalRequired: n.ApprovalRequired, ApprovalTTL: time.Duration(n.ApprovalTTL.Milliseconds()) * time.Millisecond,
		DownstreamKey: n.DownstreamKey, CreatedAt: now, UpdatedAt: now, DBNow: now, Events: 1,
		ApprovalsNeeded: n.ApprovalsNeeded, PolicyDigest: n.PolicyDigest, ApprovalRule: n.ApprovalRule,
		Approvals: n.approvals(), Supersedes: n.Supersedes,
		BudgetNames: n.BudgetNames, BudgetScopes: n.BudgetScopes, Identity: n.Identity,
	}
	if len(n.Approvals) > 0 {
		// Born approved by its editor: the row as the statement wrote it.
		op.ApprovalDecision, op.ApprovalDecidedBy, op.ApprovalDecidedAt = "APPROVE", n.ApprovedBy, now
		op.ApprovalFingerprint, op.ApprovalReason = n.Fingerprint, n.ApprovedReason
		if n.State == "READY" {
			op.ApprovalExpiresAt = now.Add(time.Duration(n.ApprovalTTL.Milliseconds()) * time.Millisecond)
		}
	}
	if n.Claim != nil {
		op.State, op.Events, op.Fence, op.Attempts = n.Claim.To, 2, 1, 1
		op.LeaseOwner, op.LeaseExpiresAt, op.NextReconcileAt = n.Lease.Owner, r.LeaseExpiresAt.Time, r.LeaseExpiresAt.Time
		op.FirstClaimedAt = now
	}
	return op
}

// OperationGetByKey reads the operation holding (tenant, tool, key).
func (c *Conn) OperationGetByKey(ctx context.Context, tenant, tool, key string) (Operation, error) {
	r, err := c.q.OperationGetByKey(ctx, c.dbtx, db.OperationGetByKeyParams{Tenant: tenant, Tool: tool, IdempotencyKey: key})
	return one(r, err, func(r db.Operation) db.Operation { return r })
}

// ClockNow reads the database's clock, the one every time rule is judged
// on.
func (c *Conn) ClockNow(ctx context.Context) (time.Time, error) {
	now, err := c.q.ClockNow(ctx, c.dbtx)
	if err != nil {
		return time.Time{}, interpretError(err)
	}
	return now.Time, nil
}

// OperationGet reads an operation of the tenant; another tenant's id is
// ErrNotFound.
func (c *Conn) OperationGet(ctx context.Context, tenant, id string) (Operation, error) {
	r, err := c.q.OperationGet(ctx, c.dbtx, db.OperationGetParams{ID: id, Tenant: tenant})
	if err != nil {
		return Operation{}, interpretError(err)
	}
	return withNow(r.Operation, r.DbNow), nil
}

// OperationGetForUpdate reads and row-locks an operation for the rest of the
// caller's transaction.
func (c *Conn) OperationGetForUpdate(ctx context.Context, tenant, id string) (Operation, error) {
	r, err := c.q.OperationGetForUpdate(ctx, c.dbtx, db.OperationGetForUpdateParams{ID: id, Tenant: tenant})
	return one(r, err, func(r db.Operation) db.Operation { return r })
}

// OperationEvents returns an operation's event log in order.
func (c *Conn) OperationEvents(ctx context.Context, id string) ([]Event, error) {
	rows, err := c.q.OperationEvents(ctx, c.dbtx, id)
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = Event{OperationID: r.OperationID, Seq: r.Seq, Type: r.Type, Actor: r.Actor, FromState: r.FromState.String,
			ToState: r.ToState, Attempt: r.Attempt, Fence: r.Fence, Detail: r.Detail, CreatedAt: r.CreatedAt.Time}
	}
	return out, nil
}

// Lease says who claims an operation and for how long.
type Lease struct {
	Owner    string
	Duration time.Duration
	// Actor names the claimer in the event log.
	Actor string
}

// Claim is the guarded claim of an operation, as the state machine's table
// describes it: From → To with Event, and whether the approval must be in
// force.
type Claim struct {
	From, To, Event        string
	RequireApprovalInForce bool
	// RequirePolicyCurrent demands that an operation nothing was sent for
	// was judged under one of PolicyDigests (the policies the caller holds
	// current).
	RequirePolicyCurrent bool
	PolicyDigests        []string
	// Base is the operation as the caller holds it, if in state From. The
	// claim then returns only the columns it sets and those that change
	// without an event (OperationClaimKnown), and Base supplies the rest
	// when it is the version the claim changed; otherwise, or when the
	// claim did not take, the operation is read in a second statement.
	// Without it the claim returns every column, claimed or not, in one.
	Base Operation
}

// OperationClaim moves a READY operation whose approval holds to EXECUTING
// for the lease holder (fence + 1, attempts + 1), with its event, and
// returns it with claimed = true. An operation it could not claim comes back
// as it was (claimed = false) in the same round trip; ErrNotFound means the
// tenant has no such operation.
func (c *Conn) OperationClaim(ctx context.Context, tenant, id string, cl Claim, l Lease) (op Operation, claimed bool, err error) {
	if cl.Base.ID == id && cl.Base.Tenant == tenant && cl.Base.State == cl.From {
		return c.operationClaimKnown(ctx, cl, l)
	}
	doc, _, err := c.eventDoc(id, cl.Event, l.Actor, cl.To, "", nil)
	if err != nil {
		return Operation{}, false, err
	}
	rows, err := c.q.OperationClaim(ctx, c.dbtx, db.OperationClaimParams{Doc: doc,
		ID: id, Tenant: tenant, LeaseOwner: text(l.Owner), LeaseSeconds: l.Duration.Seconds(), Actor: l.Actor,
		FromState: cl.From, ToState: cl.To, EventType: cl.Event, RequireApprovalInForce: cl.RequireApprovalInForce,
		RequirePolicyCurrent: cl.RequirePolicyCurrent, PolicyDigests: cl.PolicyDigests,
	})
	if err != nil {
		return Operation{}, false, interpretError(err)
	}
	if len(rows) == 0 {
		return Operation{}, false, ErrNotFound
	}
	r := rows[0]
	return claimedRow(r), r.Claimed, nil
}

// claimReadTimeout bounds the read after a claim whose copy was outdated,
// which runs detached from the caller's cancellation.
const claimReadTimeout = 5 * time.Second

// operationClaimKnown is OperationClaim with cl.Base: a claimed row comes
// back from the columns the statement returns and the rest of Base when
// Base's events say it is the version the claim changed (one behind), and
// from a read after the claim otherwise; a claim that did not take reads
// the row (Base is held only until its first claim, so that is rare).
func (c *Conn) operationClaimKnown(ctx context.Context, cl Claim, l Lease) (op Operation, claimed bool, err error) {
	b := cl.Base
	doc, _, err := c.eventDoc(b.ID, cl.Event, l.Actor, cl.To, "", nil)
	if err != nil {
		return Operation{}, false, err
	}
	rows, err := c.q.OperationClaimKnown(ctx, c.dbtx, db.OperationClaimKnownParams{Doc: doc,
		ID: b.ID, Tenant: b.Tenant, LeaseOwner: text(l.Owner), LeaseSeconds: l.Duration.Seconds(), Actor: l.Actor,
		FromState: cl.From, ToState: cl.To, EventType: cl.Event, RequireApprovalInForce: cl.RequireApprovalInForce,
		RequirePolicyCurrent: cl.RequirePolicyCurrent, PolicyDigests: cl.PolicyDigests,
	})
	if err != nil {
		return Operation{}, false, interpretError(err)
	}
	if len(rows) == 0 {
		op, err := c.OperationGet(ctx, b.Tenant, b.ID)
		return op, false, err
	}
	r := rows[0]
	if b.Events+1 != r.Events {
		// The claim committed with this caller's lease: the read must not
		// fail because the caller gave up meanwhile, or the operation would
		// sit claimed, with nothing sent, until its lease expired.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimReadTimeout)
		defer cancel()
		op, err := c.OperationGet(rctx, b.Tenant, b.ID)
		if errors.Is(err, ErrNotFound) {
			// The claim committed: a read that finds nothing (the row pruned
			// since) must not pass for an unknown operation.
			err = fmt.Errorf("store: operation %s gone after its claim: %w", b.ID, ErrUnavailable)
		}
		if err != nil {
			// Whatever the read's failure, the claim committed: say so
			// (MayHaveCommitted), so that the caller releases it.
			return Operation{}, false, &unavailable{msg: fmt.Sprintf("%v: the claim committed, and reading it back failed: %v", ErrUnavailable, err),
				mayHaveCommitted: true}
		}
		if op.Events != r.Events {
			// Changed again since the claim: what this process holds is no
			// longer the claim's attempt, as if it had crashed after it.
			return op, false, nil
		}
		op.DBNow = r.DbNow.Time // the clock the claim measured its lease on
		return op, true, nil
	}
	op = b
	op.State, op.Fence, op.Attempts = r.State, r.Fence, r.Attempts
	op.LeaseOwner, op.LeaseExpiresAt, op.NextReconcileAt = r.LeaseOwner.String, r.LeaseExpiresAt.Time, r.NextReconcileAt.Time
	op.FirstClaimedAt, op.Waited, op.ReconcileAttempts = r.FirstClaimedAt.Time, r.Waited, r.ReconcileAttempts
	op.FirstSentFence = r.FirstSentFence.Int64
	op.Events, op.UpdatedAt, op.DBNow = r.Events, r.UpdatedAt.Time, r.DbNow.Time
	return op, true, nil
}

// OperationTakeOver fences out the holder of an expired lease (fence + 1)
// and hands the operation to l. ErrConditionFailed means the lease had not
// expired, the key window was past, or someone else moved first.
func (c *Conn) OperationTakeOver(ctx context.Context, t TakeOver, l Lease) (Operation, error) {
	// Its event stays in From, with the statement's detail.
	doc, _, err := c.eventDoc(t.ID, t.Event, l.Actor, t.From, TakeOverDetail, nil)
	if err != nil {
		return Operation{}, err
	}
	r, err := c.q.OperationTakeOver(ctx, c.dbtx, db.OperationTakeOverParams{Doc: doc,
		ID: t.ID, Tenant: t.Tenant, Fence: t.Fence, FromState: t.From, EventType: t.Event,
		LeaseOwner: text(l.Owner), LeaseSeconds: l.Duration.Seconds(), Actor: l.Actor,
		KeyRetentionSeconds: t.KeyWindow.Retention.Seconds(), AheadSeconds: t.KeyWindow.Ahead.Seconds(), KeyWindowFactor: t.KeyWindow.Factor,
	})
	return wrote(oneGuarded("OperationTakeOver", r, err, func(r db.OperationTakeOverRow) db.Operation { return db.Operation(r) }))
}

// TakeOver is the guarded takeover of an expired lease: the operation in
// From with the Fence the caller read, its event, and the key window a
// resubmission must fit in.
type TakeOver struct {
	Tenant, ID  string
	From, Event string
	Fence       int64
	KeyWindow   KeyWindow
}

// KeyWindow guards a resubmission of a downstream key: with a Retention (how
// long the downstream remembers a key; 0 = forever), a request decided now
// that reaches the downstream within Ahead must still land inside Factor of
// the retention counted from the operation's first claim, on the database's
// clock. The ledger's send rule (internal/ledger/sendrule.go) sets Factor.
type KeyWindow struct {
	Retention, Ahead time.Duration
	Factor           float64
}

// TransitionParams is one guarded state change with its event: the
// parameters of OperationTransition (ledger.Transition is an edge of the
// state table).
type TransitionParams struct {
	Tenant, ID string
	// From lists the states the operation may be in; Fence must match too.
	From  []string
	Fence int64
	To    string
	// RequireLeaseExpired additionally demands an expired lease.
	RequireLeaseExpired bool
	// RequireUnsent demands that nothing may have reached the downstream.
	RequireUnsent bool
	// RequireSentIfReady demands that a READY operation was sent before.
	RequireSentIfReady bool
	// RequireFirstSend demands that no attempt before the current fence may
	// have reached the downstream.
	RequireFirstSend bool
	// KeyWindow, when its Retention is set, demands that a resubmission of
	// the downstream key decided now is still safe.
	KeyWindow KeyWindow
	// ExternalRef and Result are kept when empty.
	ExternalRef string
	Result      []byte
	// SetError replaces the stored error with Error (nil clears it).
	SetError bool
	Error    []byte
	// ReconcileAfter schedules the reconciler when To is OUTCOME_UNKNOWN.
	ReconcileAfter time.Duration
	// The event.
	Event, Actor, Detail string
	// Base is the operation as the caller last read it. The statement
	// returns only the columns it sets and those that change without an
	// event (see NewOperation.row), and Base supplies the rest when it is
	// the version the statement changed (its Events one behind); otherwise
	// the operation is read again after the write.
	Base Operation
}

// OperationTransition applies t. ErrConditionFailed means a guard refused: the
// state or fence changed under the caller, which must not retry blindly but
// re-read the operation. It returns the row as the transition left it; when
// t.Base was not the version it changed, the row as read just after, which
// may already show a later change.
func (c *Conn) OperationTransition(ctx context.Context, t TransitionParams) (Operation, error) {
	// The event records digests of the result and error it sets (docs/audit.md).
	resultDigest, err := c.digest(t.Result)
	if err != nil {
		return Operation{}, fmt.Errorf("store: operation %s: result: %w", t.ID, err)
	}
	errorDigest := audit.Fact{Key: "error_digest", Null: true} // unchanged unless SetError ("": cleared)
	if t.SetError {
		d, err := c.digest(t.Error)
		if err != nil {
			return Operation{}, fmt.Errorf("store: operation %s: error: %w", t.ID, err)
		}
		errorDigest = str("error_digest", d)
	}
	doc, facts, err := c.eventDoc(t.ID, t.Event, t.Actor, t.To, t.Detail, []audit.Fact{
		errorDigest, opt("external_ref", t.ExternalRef), opt("result_digest", resultDigest),
	})
	if err != nil {
		return Operation{}, err
	}
	r, err := c.q.OperationTransition(ctx, c.dbtx, db.OperationTransitionParams{Doc: doc, Facts: facts,
		ID: t.ID, Tenant: t.Tenant, ToState: t.To, ExternalRef: text(t.ExternalRef), Result: t.Result,
		SetError: t.SetError, Error: t.Error, ReconcileAfterSeconds: t.ReconcileAfter.Seconds(),
		FromStates: t.From, Fence: t.Fence, RequireLeaseExpired: t.RequireLeaseExpired,
		RequireUnsent: t.RequireUnsent, RequireFirstSend: t.RequireFirstSend, RequireSentIfReady: t.RequireSentIfReady,
		KeyRetentionSeconds: t.KeyWindow.Retention.Seconds(), AheadSeconds: t.KeyWindow.Ahead.Seconds(), KeyWindowFactor: t.KeyWindow.Factor,
		EventType: t.Event, Actor: t.Actor, Detail: t.Detail,
	})
	if err != nil {
		return Operation{}, guarded("OperationTransition", err)
	}
	if t.Base.ID != t.ID || t.Base.Events+1 != r.Events {
		// Base is not the version the statement changed (a caller that read
		// it before another change that kept its guard true): read what
		// the statement left, or what came after it.
		op, err := c.OperationGet(ctx, t.Tenant, t.ID)
		if errors.Is(err, ErrNotFound) {
			// The transition committed: a read that finds nothing (the row
			// pruned since) must not pass for a failed guard.
			err = fmt.Errorf("store: operation %s gone after its transition: %w", t.ID, ErrUnavailable)
		}
		if err != nil {
			return Operation{}, err
		}
		return op, nil
	}
	op := t.Base
	op.State, op.LeaseOwner, op.LeaseExpiresAt = t.To, "", time.Time{}
	op.Events, op.UpdatedAt, op.DBNow, op.Waited = r.Events, r.UpdatedAt.Time, r.UpdatedAt.Time, r.Waited
	op.ReconcileAttempts, op.NextReconcileAt = r.ReconcileAttempts, r.NextReconcileAt.Time
	op.FirstSentFence, op.ExternalRef, op.Result, op.Error = r.FirstSentFence.Int64, r.ExternalRef.String, r.Result, r.Error
	return op, nil
}

// Decision is an approval-related change: a decision (Decision "APPROVE" or
// "DENY") or an expiry (Decision empty, which clears the approval).
type Decision struct {
	Tenant, ID string
	// From lists the states the operation may be in.
	From                []string
	To                  string
	Decision            string
	DecidedBy           string
	ApprovedFingerprint string
	Reason              string
	Event, Actor        string
	Detail              string
	// DecidedByName is the decider's principal name, for the approvals
	// list.
	DecidedByName string
	// ApprovalsNeeded, PolicyDigest, ApprovalRule and ApprovalTTL, when set,
	// are the current policy's judgement (with the row locked), which the
	// decision records; otherwise the operation's stay.
	ApprovalsNeeded            *int32
	PolicyDigest, ApprovalRule string
	ApprovalTTL                time.Duration
	// SupersededBy, when set, links the operation to its edit.
	SupersededBy string
	// ShownArgs, with a decision, are the arguments as the approver was
	// shown them (the operation's canonical args): the event records their
	// digest (docs/audit.md).
	ShownArgs []byte
	// RequireLapsedUnsent demands that the approval lapsed on the database's
	// clock and that nothing was sent (an expiry, a renewal of a lapsed
	// approval, a denial of a READY operation).
	RequireLapsedUnsent bool
	// Notify queues an approval notification when the change is an expiry
	// (the operation awaits approval again).
	Notify bool
}

// OperationDecide applies d, guarded on d.From (and, when asked, on the
// approval having lapsed with nothing sent). ErrConditionFailed means a
// guard refused.
func (c *Conn) OperationDecide(ctx context.Context, d Decision) (Operation, error) {
	shown, err := c.digest(d.ShownArgs)
	if err != nil {
		return Operation{}, fmt.Errorf("store: operation %s: shown args: %w", d.ID, err)
	}
	// What the decision set; approvals_needed and policy_digest NULL when
	// it keeps the operation's (docs/audit.md).
	needed := audit.Fact{Key: "approvals_needed", Null: true}
	if d.ApprovalsNeeded != nil {
		needed = str("approvals_needed", itoa(*d.ApprovalsNeeded))
	}
	doc, facts, err := c.eventDoc(d.ID, d.Event, d.Actor, d.To, d.Detail, []audit.Fact{
		needed, opt("approved_fingerprint", d.ApprovedFingerprint), opt("approver", d.DecidedBy),
		str("approver_name", d.DecidedByName), opt("args_digest", shown), opt("decision", d.Decision),
		opt("policy_digest", d.PolicyDigest), opt("reason", d.Reason), opt("superseded_by", d.SupersededBy),
	})
	if err != nil {
		return Operation{}, err
	}
	p := db.OperationDecideParams{Doc: doc, Facts: facts,
		ID: d.ID, Tenant: d.Tenant, FromStates: d.From, ToState: d.To, Decision: text(d.Decision),
		DecidedBy: text(d.DecidedBy), ApprovedFingerprint: text(d.ApprovedFingerprint), Reason: text(d.Reason),
		EventType: d.Event, Actor: d.Actor, Detail: d.Detail, RequireLapsedUnsent: d.RequireLapsedUnsent, Notify: d.Notify,
		DecidedByName: d.DecidedByName, PolicyDigest: text(d.PolicyDigest), ApprovalRule: text(d.ApprovalRule),
		SupersededBy: text(d.SupersededBy),
	}
	if d.ApprovalsNeeded != nil {
		p.ApprovalsNeeded = pgtype.Int4{Int32: *d.ApprovalsNeeded, Valid: true}
	}
	if d.ApprovalTTL > 0 {
		p.ApprovalTtlMs = pgtype.Int8{Int64: d.ApprovalTTL.Milliseconds(), Valid: true}
	}
	r, err := c.q.OperationDecide(ctx, c.dbtx, p)
	return wrote(oneGuarded("OperationDecide", r, err, func(r db.OperationDecideRow) db.Operation { return db.Operation(r) }))
}

// PolicyApply is the policy in force applied to an operation nothing was
// sent for that was judged under OldDigest (OperationPolicyApply): To with
// Event, the quorum the policy demands (which only grows), and which side
// of it the caller found the operation on.
type PolicyApply struct {
	Tenant, ID string
	From       []string
	To         string
	OldDigest  string
	// PolicyDigest, ApprovalsNeeded, ApprovalTTL and ApprovalRule are the
	// current policy's judgement.
	PolicyDigest    string
	ApprovalsNeeded int32
	ApprovalTTL     time.Duration
	ApprovalRule    string
	// RequireShort demands fewer approvals than the quorum; RequireMet at
	// least as many.
	RequireShort, RequireMet bool
	Event, Actor, Detail     string
	Notify                   bool
}

// OperationPolicyApply applies p; ErrConditionFailed means a guard refused (the
// operation was judged again, sent, or decided meanwhile): read it again.
func (c *Conn) OperationPolicyApply(ctx context.Context, p PolicyApply) (Operation, error) {
	// The quorum only grows, to the greater of the operation's and the
	// policy's demand, which the event records as approvals_demanded
	// (docs/audit.md).
	doc, facts, err := c.eventDoc(p.ID, p.Event, p.Actor, p.To, p.Detail, []audit.Fact{
		str("approvals_demanded", itoa(p.ApprovalsNeeded)), str("policy_digest", p.PolicyDigest),
	})
	if err != nil {
		return Operation{}, err
	}
	r, err := c.q.OperationPolicyApply(ctx, c.dbtx, db.OperationPolicyApplyParams{Doc: doc, Facts: facts,
		ID: p.ID, Tenant: p.Tenant, FromStates: p.From, ToState: p.To, OldDigest: p.OldDigest,
		PolicyDigest: p.PolicyDigest, ApprovalsNeeded: p.ApprovalsNeeded, ApprovalTtlMs: p.ApprovalTTL.Milliseconds(),
		ApprovalRule: p.ApprovalRule, RequireShort: p.RequireShort, RequireMet: p.RequireMet,
		EventType: p.Event, Actor: p.Actor, Detail: p.Detail, Notify: p.Notify,
	})
	return wrote(oneGuarded("OperationPolicyApply", r, err, func(r db.OperationPolicyApplyRow) db.Operation { return db.Operation(r) }))
}

// OperationNotify notifies every replica's waiters on the operation when
// the transaction commits (see the query).
func (c *Conn) OperationNotify(ctx context.Context, id string) error {
	return interpretError(c.q.OperationNotify(ctx, c.dbtx, id))
}

// OperationMarkWaited records that an Execute waits for the outcome of the
// attempt holding fence. It reports false when that attempt already ended.
func (c *Conn) OperationMarkWaited(ctx context.Context, tenant, id string, fence int64) (bool, error) {
	n, err := c.q.OperationMarkWaited(ctx, c.dbtx, db.OperationMarkWaitedParams{ID: id, Tenant: tenant, Fence: fence})
	return n == 1, interpretError(err)
}

// OperationClaimUnresolved hands up to batch stuck operations to the
// calling reconciler and pushes their next attempt back by an exponential
// backoff (base × 2^attempts, capped at max), skipping rows other replicas
// hold.
func (c *Conn) OperationClaimUnresolved(ctx context.Context, batch int32, base, max time.Duration) ([]Operation, error) {
	rows, err := c.q.OperationClaimUnresolved(ctx, c.dbtx, db.OperationClaimUnresolvedParams{
		BatchSize: batch, BaseBackoffSeconds: base.Seconds(), MaxBackoffSeconds: max.Seconds(),
	})
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]Operation, len(rows))
	for i, r := range rows {
		out[i] = withNow(r.Operation, r.DbNow)
	}
	return out, nil
}

// OperationCountOpen counts open operations by state, for metrics.
func (c *Conn) OperationCountOpen(ctx context.Context) (map[string]int64, error) {
	rows, err := c.q.OperationCountOpen(ctx, c.dbtx)
	if err != nil {
		return nil, interpretError(err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, nil
}

// OperationPrune deletes up to batch finished operations last changed more
// than olderThan ago and returns how many it deleted.
func (c *Conn) OperationPrune(ctx context.Context, olderThan time.Duration, batch int32) (int64, error) {
	n, err := c.q.OperationPrune(ctx, c.dbtx, db.OperationPruneParams{OlderThanSeconds: olderThan.Seconds(), BatchSize: batch})
	return n, interpretError(err)
}

// TenantUsageBump counts one more operation created by tenant in the
// current minute and returns the minute's total.
func (c *Conn) TenantUsageBump(ctx context.Context, tenant string) (int32, error) {
	n, err := c.q.TenantUsageBump(ctx, c.dbtx, tenant)
	return n, interpretError(err)
}

// TenantUsagePrune forgets usage counters older than an hour.
func (c *Conn) TenantUsagePrune(ctx context.Context) (int64, error) {
	n, err := c.q.TenantUsagePrune(ctx, c.dbtx)
	return n, interpretError(err)
}

// WebhookEventPrune forgets up to batch webhook events received more than
// olderThan ago and returns how many it deleted.
func (c *Conn) WebhookEventPrune(ctx context.Context, olderThan time.Duration, batch int32) (int64, error) {
	n, err := c.q.WebhookEventPrune(ctx, c.dbtx, db.WebhookEventPruneParams{OlderThanSeconds: olderThan.Seconds(), BatchSize: batch})
	return n, interpretError(err)
}

// OperationGetByDownstreamKeyForUpdate reads and locks the operation that
// sent key downstream.
func (c *Conn) OperationGetByDownstreamKeyForUpdate(ctx context.Context, key string) (Operation, error) {
	r, err := c.q.OperationGetByDownstreamKeyForUpdate(ctx, c.dbtx, key)
	return one(r, err, func(r db.Operation) db.Operation { return r })
}

// WebhookEventInsert records a webhook event and reports whether it is new.
func (c *Conn) WebhookEventInsert(ctx context.Context, tool, id, operationID string) (bool, error) {
	n, err := c.q.WebhookEventInsert(ctx, c.dbtx, db.WebhookEventInsertParams{Tool: tool, ID: id, OperationID: text(operationID)})
	return n == 1, interpretError(err)
}

// ListQuery selects a page of a tenant's operations, newest first.
type ListQuery struct {
	Tenant string
	// States are the states to include; every one must be given (the
	// query reads the index once per state).
	States []string
	// Tool, when not empty, keeps only that tool's operations.
	Tool string
	// ApprovedUnsent keeps only READY operations that needed an approval
	// and have sent nothing yet (States is then ignored), through an index
	// of their own.
	ApprovedUnsent bool
	// AfterTime and AfterID are the cursor: the last operation of the
	// previous page. Zero starts from the newest operation.
	AfterTime time.Time
	AfterID   string
	// Limit is the most operations returned.
	Limit int32
}

// OperationList returns up to q.Limit of the tenant's operations in
// q.States, ordered by creation time and then id, newest first, that come
// after the cursor in that order.
func (c *Conn) OperationList(ctx context.Context, q ListQuery) ([]Operation, error) {
	before := pgtype.Timestamptz{Time: q.AfterTime, Valid: true}
	if q.AfterTime.IsZero() {
		before = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	var rows []db.Operation
	var err error
	if q.ApprovedUnsent {
		rows, err = c.q.OperationListApprovedUnsent(ctx, c.dbtx, db.OperationListApprovedUnsentParams{
			Tenant: q.Tenant, Tool: q.Tool, BeforeTime: before, BeforeID: q.AfterID, PageLimit: q.Limit,
		})
	} else {
		rows, err = c.q.OperationList(ctx, c.dbtx, db.OperationListParams{
			States: q.States, Tenant: q.Tenant, Tool: q.Tool, BeforeTime: before, BeforeID: q.AfterID, PageLimit: q.Limit,
		})
	}
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]Operation, len(rows))
	for i, r := range rows {
		out[i] = fromDB(r)
	}
	return out, nil
}
