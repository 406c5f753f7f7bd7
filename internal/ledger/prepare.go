package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/clients/go/fingerprint"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

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
	op, replayed, _, err := l.prepare(ctx, a, in, false)
	return op, replayed, err
}

// PrepareAndExecute is the one-call path: Prepare, then what an Execute of
// the operation would do, with the same guarantees and answers. A new
// operation whose tool needs no approval is claimed by the statement that
// inserts it (one statement fewer than a Prepare and a claim); one that
// awaits approval is answered as Prepare answers it; one the key already
// names is executed, or its outcome replayed, like any Execute of it. It
// reports whether the key was replayed and whether the execution made no
// downstream request because the outcome was already recorded. A refusal of
// the execution names the operation in its metadata.
func (l *Ledger) PrepareAndExecute(ctx context.Context, a Actor, in PrepareInput, wait time.Duration) (op Operation, replayed, executionReplayed bool, err error) {
	// Its insert may hand this process the operation: an attempt in
	// flight until its outcome is written.
	var claimStart time.Time
	handed := l.handing(func() bool {
		op, replayed, claimStart, err = l.prepare(ctx, a, in, true)
		return err == nil && !replayed && State(op.State) == StateExecuting
	})
	if err != nil {
		return Operation{}, false, false, err
	}
	id := op.ID
	switch {
	case handed:
		r := func() reply {
			defer l.attempts.end()
			return l.attempt(ctx, op, claimStart, false)
		}()
		op, executionReplayed, err = r.answer()
		if r.again {
			// Released unsent (its lease spent before the call could
			// start): an Execute claims it again.
			op, executionReplayed, err = l.Execute(ctx, a, id, wait)
		}
	case State(op.State) == StateAwaitingApproval:
		return op, replayed, false, nil
	default:
		op, executionReplayed, err = l.Execute(ctx, a, id, wait)
	}
	if err != nil {
		return Operation{}, replayed, false, naming(err, id)
	}
	return op, replayed, executionReplayed, nil
}

// namingKeyed names, in a refusal of a Prepare that recorded nothing (an
// unknown tool or version, args the schema refuses), the operation the
// idempotency key already names, if any: the refusal is about this
// request, and the key's earlier call (say, under a tools file that has
// changed since) may have taken effect, which a caller must not read as
// "nothing happened".
func (l *Ledger) namingKeyed(ctx context.Context, a Actor, in PrepareInput, err error) error {
	var le *Error
	if !errors.As(err, &le) || le.Metadata["operation_id"] != "" {
		return err
	}
	switch le.Reason {
	case opledgerv1.ErrorReason_ERROR_REASON_TOOL_UNKNOWN, opledgerv1.ErrorReason_ERROR_REASON_TOOL_VERSION_UNKNOWN,
		opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, opledgerv1.ErrorReason_ERROR_REASON_ARGS_TOO_LARGE,
		opledgerv1.ErrorReason_ERROR_REASON_POLICY_DENIED:
	default:
		return err
	}
	if !tool.ValidName(in.Tool) || in.IdempotencyKey == "" {
		return err
	}
	op, gerr := l.store.OperationGetByKey(ctx, a.Tenant, in.Tool, in.IdempotencyKey)
	if gerr != nil {
		return err
	}
	return naming(err, op.ID)
}

// naming adds the operation's id to a refusal that does not carry it, so
// that a caller of the one-call path can find the operation it prepared.
func naming(err error, id string) error {
	var le *Error
	if !errors.As(err, &le) || le.Metadata["operation_id"] != "" {
		return err
	}
	cp := *le
	cp.Metadata = map[string]string{"operation_id": id}
	for k, v := range le.Metadata {
		cp.Metadata[k] = v
	}
	return &cp
}

func (l *Ledger) prepare(ctx context.Context, a Actor, in PrepareInput, claimIt bool) (op Operation, replayed bool, claimStart time.Time, err error) {
	defer func() {
		if err != nil && op.ID == "" {
			err = l.namingKeyed(ctx, a, in, err)
		}
	}()
	var none time.Time
	t, err := l.ResolveTool(in.Tool, in.ToolVersion)
	if err != nil {
		return Operation{}, false, none, err
	}
	if in.Args == nil {
		in.Args = &structpb.Struct{}
	}
	canonical, err := l.checkArgs(t, in.Args, "args")
	if err != nil {
		return Operation{}, false, none, err
	}
	// The fingerprint covers the canonical bytes just produced: the args are
	// canonicalised once per Prepare.
	fp, err := fingerprint.OfCanonical(in.Method, a.Tenant, t.Name, t.Version, canonical)
	if err != nil {
		return Operation{}, false, none, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: "args", Message: err.Error()}
	}
	if in.KeyDigest == "" {
		in.KeyDigest = digest(in.IdempotencyKey)
	}
	j, err := judge(t, a, in.Args)
	if err != nil {
		// The policy refuses a new operation; a key that already names one
		// (prepared before the policy changed) gets its replay, as ever.
		asked := time.Now()
		if existing, gerr := l.store.OperationGetByKey(ctx, a.Tenant, t.Name, in.IdempotencyKey); gerr == nil {
			op, err := l.keyed(existing, fp, t.Name, asked)
			return op, err == nil, none, err
		}
		return Operation{}, false, none, err
	}
	state := StateReady
	if j.Needed > 0 {
		state = StateAwaitingApproval
	}
	if err := Check("", EventPrepared, state); err != nil {
		return Operation{}, false, none, storeErr(err)
	}
	id := newID("op_")
	n := store.NewOperation{
		ID: id, Tenant: a.Tenant, Tool: t.Name, ToolVersion: t.Version, IdempotencyKey: in.IdempotencyKey,
		Args: canonical, ArgsCanonical: true, Fingerprint: fp, State: string(state), PreparedBy: a.ID,
		ApprovalRequired: j.Needed > 0, ApprovalsNeeded: int32(j.Needed), ApprovalRule: j.Rule, PolicyDigest: t.Policy.Digest,
		DownstreamKey: l.keys.key(a.Tenant, t.Name, in.IdempotencyKey, fp),
		ApprovalTTL:   approvalTTL(t, j),
		Actor:         a.Name, Detail: "prepared with key digest " + in.KeyDigest,
		Notify: l.notifyOn(),
	}
	if claimIt && state == StateReady {
		// The one-call path: the statement that inserts the operation also
		// claims it, as the claim would (the table's claim rule).
		n.Claim = &claim
		n.Lease = store.Lease{Owner: l.leaseOwner(), Duration: l.lease(l.bound[t.Name+"@"+t.Version])}
	}
	var existing Operation
	var asked time.Time // before the read of existing
	retries := 0        // of a statement undone as a deadlock
	for attempt := 0; ; attempt++ {
		claimStart := time.Now()
		insCtx, cancel := ctx, context.CancelFunc(func() {})
		if n.Claim != nil {
			var err error
			if insCtx, cancel, err = handingCtx(ctx); err != nil {
				return Operation{}, false, none, err
			}
		}
		op, inserted, err := l.insert(insCtx, a, t, in.Args, &n)
		cancel()
		if n.Claim != nil && store.MayHaveCommitted(err) {
			l.recoverClaim(a.Tenant, id, n.Lease.Owner)
		}
		if errors.Is(err, store.ErrRetry) && retries < maxInsertRetries {
			// PostgreSQL undid the insert (or its reservation) as a
			// deadlock or a serialization failure: nothing of it was
			// stored, and it may succeed if sent again (an approval with
			// edits that moves a share to another key while this call
			// takes the same identity; a prune deleting this key's
			// operation under a replay).
			retries++
			attempt--
			continue
		}
		if err != nil && admissionRefusal(err) {
			// A budget or an identity refuses a new operation: if the key
			// already names one, this is its replay, which they never refuse.
			if _, gerr := l.store.OperationGetByKey(ctx, a.Tenant, t.Name, in.IdempotencyKey); gerr == nil {
				err, inserted = nil, false
			}
		}
		if err != nil {
			return Operation{}, false, none, storeErr(err)
		}
		if inserted {
			if l.hooks != nil && l.hooks.AfterPrepare != nil {
				l.hooks.AfterPrepare(ctx, op)
			}
			if State(op.State) == StateAwaitingApproval && l.notifyOn() {
				l.kickNotifier()
			}
			l.holdLive(op)
			return op, false, claimStart, nil
		}
		if l.hooks != nil && l.hooks.PrepareConflict != nil {
			l.hooks.PrepareConflict(ctx)
		}
		asked = time.Now()
		existing, err = l.store.OperationGetByKey(ctx, a.Tenant, t.Name, in.IdempotencyKey)
		if err == nil {
			break
		}
		// The row that refused the insert was committed, so it is gone
		// only if the pruner deleted it in between (a replay at the
		// retention's age): the key is free again, and a key reused after
		// its operation was pruned starts a new operation. Once more; a
		// key that keeps vanishing is not a replay's doing.
		if !errors.Is(err, store.ErrNotFound) || attempt > 0 {
			return Operation{}, false, none, storeErr(err)
		}
	}
	op, err = l.keyed(existing, fp, t.Name, asked)
	return op, err == nil, none, err
}

// keyed answers a Prepare whose key names existing: its replay when the
// fingerprints match, else the key's reuse. asked is when existing was read.
func (l *Ledger) keyed(existing Operation, fp, toolName string, asked time.Time) (Operation, error) {
	if existing.Fingerprint != fp {
		return Operation{}, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_IDEMPOTENCY_KEY_REUSED,
			Message:  "this idempotency key was already used for a different request (args, tool version or method differ); use a new key for a new operation",
			Metadata: map[string]string{"operation_id": existing.ID}}
	}
	l.obs.DuplicatePrevented("Prepare", toolName, true)
	l.remember(existing, asked)
	return existing, nil
}

// checkArgs canonicalises args and checks them against t's schema and the
// size bound; field names them in the refusal ("args", "edited_args").
func (l *Ledger) checkArgs(t *tool.Tool, args *structpb.Struct, field string) ([]byte, error) {
	canonical, err := fingerprint.Canonicalize(args)
	if err != nil {
		return nil, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: field, Message: err.Error()}
	}
	if len(canonical) > l.cfg.MaxArgsBytes {
		return nil, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_TOO_LARGE, Field: field,
			Message: fmt.Sprintf("%s are %d bytes in canonical form; at most %d are allowed", field, len(canonical), l.cfg.MaxArgsBytes)}
	}
	if err := t.ValidateArgs(args); err != nil {
		le := &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: field,
			Message: fmt.Sprintf("%s do not match the schema of %s@%s", field, t.Name, t.Version)}
		var ae *tool.ArgsError
		if errors.As(err, &ae) {
			for _, v := range ae.Violations {
				le.Violations = append(le.Violations, Violation{Field: field + v.Field, Description: v.Description})
			}
		} else {
			le.Violations = []Violation{{Field: field, Description: err.Error()}}
		}
		return nil, le
	}
	return canonical, nil
}

// maxInsertRetries bounds how often a Prepare sends its insert again after
// PostgreSQL undid it as a deadlock or a serialization failure.
const maxInsertRetries = 3

// errKeyTaken rolls back a Prepare's quota count when its insert found the
// key taken: the caller reads the operation that has it.
var errKeyTaken = errors.New("ledger: the idempotency key is taken")

// admissionRefusal reports a refusal by a budget or a business identity.
func admissionRefusal(err error) bool {
	var le *Error
	return errors.As(err, &le) && (le.Reason == opledgerv1.ErrorReason_ERROR_REASON_LIMIT_EXCEEDED ||
		le.Reason == opledgerv1.ErrorReason_ERROR_REASON_OPERATION_DUPLICATE)
}

// insert stores a new operation of t prepared by a. A tool with one limit,
// per key, reserves the operation's budget share in the insert's own
// statement (insertReserving); when the share does not fit there, and for
// any other tool with limits, the shares are reserved first (admit, a
// statement of its own). The business identity is taken by the insert's
// own statement; with a quota the insert runs in a transaction that also
// counts the tenant's operations this minute. An operation refused by any
// of them is not stored, and the shares reserved for it are released. A
// limit with `over: approve` that the call goes past makes n await approval
// (and not be claimed).
func (l *Ledger) insert(ctx context.Context, a Actor, t *tool.Tool, args *structpb.Struct, n *store.NewOperation) (Operation, bool, error) {
	if reservesInInsert(t) {
		op, inserted, err := l.insertReserving(ctx, a, t, args, n)
		if !errors.Is(err, store.ErrSharesDoNotFit) {
			return op, inserted, err
		}
		// A share does not fit as its budget stands: the shares are
		// reserved in a statement of their own, which judges exactly (or
		// forces an `over: approve` share), as for a tenant-wide limit.
		n.Reserve, n.BudgetNames, n.BudgetScopes, n.Identity, n.TakeIdentity = nil, nil, nil, "", false
	}
	var adm admission
	if needsIdentityOrBudget(t) {
		var err error
		if adm, err = l.admit(ctx, t, a, args, n.ID); err != nil {
			return Operation{}, false, err
		}
		n.BudgetNames, n.BudgetScopes, n.Identity = adm.names, adm.scopes, adm.identity
		if adm.identity != "" {
			n.TakeIdentity, n.IdentityWindow = true, t.Identity.Window
		}
		if adm.over != nil && n.State == string(StateReady) {
			n.State, n.Claim = string(StateAwaitingApproval), nil
			n.ApprovalRequired, n.ApprovalsNeeded = true, int32(max(t.Approval.Approvers, 1))
			n.ApprovalRule, n.ApprovalTTL = "limits."+adm.over.Name, t.Approval.TTL
		}
	}
	op, inserted, err := l.insertOperation(ctx, a, n)
	if err == nil && !inserted && n.TakeIdentity {
		// Nothing inserted: the key is taken, or another operation holds
		// the identity.
		holder, key, held, gerr := l.store.IdentityGet(ctx, a.Tenant, t.Name, n.Identity)
		if gerr == nil && held && key != n.IdempotencyKey {
			err = l.duplicate(t, n.Identity, holder)
		}
	}
	if err != nil && !store.MayHaveCommitted(err) || err == nil && !inserted {
		l.release(ctx, a.Tenant, n.ID, adm)
	}
	return op, inserted, err
}

// insertOperation inserts n, with the tenant's quota when one is set.
func (l *Ledger) insertOperation(ctx context.Context, a Actor, n *store.NewOperation) (Operation, bool, error) {
	if l.cfg.OpsPerMinute <= 0 {
		return l.stmts.OperationInsert(ctx, &l.store.Conn, *n)
	}
	var op Operation
	var inserted bool
	err := l.store.InTx(ctx, func(c *store.Conn) error {
		var err error
		op, inserted, err = l.stmts.OperationInsert(ctx, c, *n)
		if err != nil {
			return err
		}
		if !inserted {
			return errKeyTaken
		}
		count, err := c.TenantUsageBump(ctx, a.Tenant)
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
	if errors.Is(err, errKeyTaken) {
		return Operation{}, false, nil
	}
	return op, inserted, err
}
