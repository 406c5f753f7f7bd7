package failpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/service"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// Install decorates the options of a service about to be wired
// (service.New) with the points and the switches this process's
// environment asks for: the named points and deduplication's switch around
// every downstream call (ledger.Hooks.Send), AfterPrepare and AfterCommit
// (ledger.Hooks), and each defect OPLEDGER_UNSAFE_DEFECTS names, in the
// store statements (ledger.Hooks.Statements), the takeover's rule
// (ledger.Hooks.TakeOverUndeduped) or the HTTP executors (o.Executors).
// The hooks o already holds run too, after the points. The product knows
// none of this: only a binary built with -tags failpoints calls Install
// (cmd/opledger), and the test harness; in any other build it does nothing.
func Install(o *service.Options) {
	if !Enabled {
		return
	}
	o.Hooks = hooks(o.Hooks)
	if Defect(DefectRedirectFailed) || Defect(DefectRefusalOverrides) {
		if o.Executors == nil {
			o.Executors = executor.NewDefaultRegistry(nil, o.Logger) // service.New's default
		}
		o.Executors = executors(o.Executors)
	}
}

// hooks are prev (which may be nil) with the points and the ledger's
// defects added.
func hooks(prev *ledger.Hooks) *ledger.Hooks {
	var h ledger.Hooks
	if prev != nil {
		h = *prev
	}
	h.AfterPrepare = point(AfterPrepare, h.AfterPrepare)
	h.AfterCommit = point(AfterCommit, h.AfterCommit)
	inner := h.Send
	h.Send = func(next ledger.SendFunc) ledger.SendFunc {
		if inner != nil {
			next = inner(next)
		}
		return send(next)
	}
	if Defect(DefectPolicyClaim) || Defect(DefectApprovalClaim) || Defect(DefectRefusalOverrides) ||
		Defect(DefectBudgetRead) || Defect(DefectIdentitySelect) {
		innerStmts := h.Statements
		h.Statements = func(s ledger.Statements) ledger.Statements {
			if innerStmts != nil {
				s = innerStmts(s)
			}
			return statements{s}
		}
	}
	if Defect(DefectTakeoverNoDedupe) {
		// The fixed defect: an expired lease taken over (and the operation
		// sent again) even where the downstream does not dedupe keys.
		h.TakeOverUndeduped = func(ledger.Operation) bool { return true }
	}
	return &h
}

// point is a hook that hits the named point, then runs then (if set).
func point(name string, then func(context.Context, ledger.Operation)) func(context.Context, ledger.Operation) {
	return func(ctx context.Context, op ledger.Operation) {
		Inject(name)
		if then != nil {
			then(ctx, op)
		}
	}
}

// send decorates an attempt's downstream call with what surrounds it in a
// failpoints build: the defects that change the call (approval-claim's and
// server-clock's bounds, OPLEDGER_UNSAFE_FRESH_DOWNSTREAM_KEY's key), and
// the points before and after it.
func send(next ledger.SendFunc) ledger.SendFunc {
	return func(ctx context.Context, op ledger.Operation, exec executor.Executor, call executor.Call) executor.Result {
		if Defect(DefectApprovalClaim) && op.Fence != 1 {
			// The fixed defect: the approval consumed by the first claim,
			// so an attempt of a later claim is not bounded by it.
			call.SendBy = time.Time{}
		}
		if Defect(DefectServerClock) {
			// The fixed defect: the database's timestamps (the approval's
			// end, the lease's) read on this server's clock.
			if !call.SendBy.IsZero() {
				call.SendBy = op.ApprovalExpiresAt
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), op.LeaseExpiresAt)
			defer cancel()
		}
		Inject(BeforeDownstream)
		if !call.SendBy.IsZero() {
			Inject(BeforeFirstSend + "/" + op.Tool)
		}
		if FreshDownstreamKeys() {
			// A new key per claim defeats the downstream's deduplication.
			call.DownstreamKey = fmt.Sprintf("%s.%d", call.DownstreamKey, op.Fence)
		}
		res := next(ctx, op, exec, call)
		Inject(AfterDownstream)
		Inject(AfterDownstream + "/" + op.Tool)
		return res
	}
}

// statements are the store statements with the ledger's defects that
// OPLEDGER_UNSAFE_DEFECTS names put back.
type statements struct{ ledger.Statements }

// OperationClaim: with policy-claim, the claim ignores the policy digest
// (as if the policy decided only at Prepare). With approval-claim, an
// operation that was claimed before and released with nothing sent is
// claimed again whatever its approval says, as when the first claim
// consumed the approval (a policy no longer current still refuses it).
func (s statements) OperationClaim(ctx context.Context, tenant, id string, cl store.Claim, lease store.Lease) (ledger.Operation, bool, error) {
	if Defect(DefectPolicyClaim) {
		cl.RequirePolicyCurrent = false
	}
	op, claimed, err := s.Statements.OperationClaim(ctx, tenant, id, cl, lease)
	if err == nil && !claimed && Defect(DefectApprovalClaim) && cl.RequireApprovalInForce &&
		ledger.State(op.State) == ledger.StateReady && op.ApprovalRequired && op.FirstSentFence == 0 && op.Fence > 0 {
		cl.RequireApprovalInForce = false
		cl.Base = ledger.Operation{} // read afresh, as another round would
		return s.Statements.OperationClaim(ctx, tenant, id, cl, lease)
	}
	return op, claimed, err
}

// OperationTransition: with refusal-overrides, a refusal after an earlier
// send that may have reached the downstream is recorded as FAILED (the
// first-send guard dropped).
func (s statements) OperationTransition(ctx context.Context, t store.TransitionParams) (ledger.Operation, error) {
	if Defect(DefectRefusalOverrides) {
		t.RequireFirstSend = false
	}
	return s.Statements.OperationTransition(ctx, t)
}

// OperationInsert: with identity-select, the business identity is checked
// by a read in Go and taken unconditionally (IdentityReserve below) before
// an insert that does not take it. An identity another key holds refuses
// the insert, as the guarded insert does. With budget-read, an insert that
// would reserve its share itself (n.Reserve) answers that it does not fit,
// so that the ledger reserves it through BudgetReserve below, as it does
// for a tenant-wide limit.
func (s statements) OperationInsert(ctx context.Context, c *store.Conn, n store.NewOperation) (ledger.Operation, bool, error) {
	if Defect(DefectBudgetRead) && n.Reserve != nil {
		return ledger.Operation{}, false, store.ErrSharesDoNotFit
	}
	if Defect(DefectIdentitySelect) && n.TakeIdentity {
		held, err := s.IdentityReserve(ctx, c, n.Tenant, n.Tool, n.Identity, n.ID, n.IdempotencyKey, n.IdentityWindow)
		if err != nil || held {
			return ledger.Operation{}, false, err
		}
		n.TakeIdentity = false
	}
	return s.Statements.OperationInsert(ctx, c, n)
}

// IdentityReserve: with identity-select, a SELECT, the decision in Go, and
// an insert regardless: two Prepares that read before either commits both
// take the identity.
func (s statements) IdentityReserve(ctx context.Context, c *store.Conn, tenant, tool, identity, id, key string, window time.Duration) (bool, error) {
	if !Defect(DefectIdentitySelect) {
		return s.Statements.IdentityReserve(ctx, c, tenant, tool, identity, id, key, window)
	}
	_, holderKey, held, err := c.IdentityGet(ctx, tenant, tool, identity)
	if err != nil || held && holderKey != key {
		return held, err
	}
	return false, c.IdentityTake(ctx, tenant, tool, identity, id, key, window)
}

// BudgetReserve: with budget-read, each budget's uses are read, the
// decision made in Go (ledger.BudgetRoom), and the shares then taken
// unconditionally: Prepares that read before any of them commits all find
// room.
func (s statements) BudgetReserve(ctx context.Context, c *store.Conn, limits []*tool.Limit, rs []store.Reservation, async bool) (store.Reserved, error) {
	if !Defect(DefectBudgetRead) {
		return s.Statements.BudgetReserve(ctx, c, limits, rs, async)
	}
	res := store.Reserved{Refused: -1, Over: -1}
	forced := slices.Clone(rs)
	for i, r := range rs {
		uses, now, err := c.BudgetGet(ctx, r.Tenant, r.Name, r.Scope, r.Window)
		if err != nil {
			return res, err
		}
		wait, ever := ledger.BudgetRoom(limits[i], uses, now, r.Amount)
		fits := ever && wait == 0 && len(uses) < r.MaxUses
		if !fits && !r.Force {
			return store.Reserved{Refused: i, Over: -1}, nil
		}
		if !fits && res.Over < 0 {
			res.Over = i
		}
		forced[i].Force = true
	}
	if _, err := s.Statements.BudgetReserve(ctx, c, limits, forced, async); err != nil {
		return res, err
	}
	return res, nil
}

// BudgetReserveEach: with budget-read, the budget's uses are read once, each
// share of the batch decided in Go on them (ledger.BudgetRoom), and the
// admitted ones then taken unconditionally: the shares that travel together
// all find the room that was there before any of them, as Prepares that
// read before any of them commits do.
func (s statements) BudgetReserveEach(ctx context.Context, c *store.Conn, lim *tool.Limit, rs []store.Reservation) ([]store.Share, error) {
	if !Defect(DefectBudgetRead) || len(rs) == 0 {
		return s.Statements.BudgetReserveEach(ctx, c, lim, rs)
	}
	uses, now, err := c.BudgetGet(ctx, rs[0].Tenant, rs[0].Name, rs[0].Scope, rs[0].Window)
	if err != nil {
		return nil, err
	}
	out := make([]store.Share, len(rs))
	var take []store.Reservation
	for i, r := range rs {
		wait, ever := ledger.BudgetRoom(lim, uses, now, r.Amount)
		fits := ever && wait == 0 && len(uses) < r.MaxUses
		switch {
		case fits:
			out[i] = store.ShareTaken
		case r.Force:
			out[i] = store.ShareOver
		default:
			continue
		}
		r.Force = true
		take = append(take, r)
	}
	if len(take) > 0 {
		if _, err := s.Statements.BudgetReserveEach(ctx, c, lim, take); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// executors is reg with its HTTP executors built with the executor's
// defects that OPLEDGER_UNSAFE_DEFECTS names put back; every other type
// is reg's as it is.
func executors(reg *executor.Registry) *executor.Registry {
	out := executor.NewRegistry()
	for _, typ := range reg.Types() {
		err := out.Register(typ, func(s executor.Settings) (executor.Executor, error) {
			if typ == executor.TypeHTTP && Defect(DefectRedirectFailed) {
				s.Reclassify = redirectFailed
			}
			e, err := reg.New(typ, s)
			if err != nil {
				if u := errors.Unwrap(err); u != nil {
					err = u // out.New names the type and the tool again
				}
				return nil, err
			}
			if h, ok := e.(*executor.HTTP); ok && Defect(DefectRefusalOverrides) {
				return laterRefusals{h, s.Classification}, nil
			}
			return e, nil
		})
		if err != nil {
			panic(err) // cannot happen: out is new, and reg's names are distinct
		}
	}
	return out
}

// redirectFailed is the HTTP executor's fixed defect of redirect-failed: a
// 3xx, which the executor classifies as an unknown outcome (the
// downstream may have acted before redirecting), taken for a definitive
// refusal.
func redirectFailed(r executor.Result) executor.Result {
	if r.Outcome == executor.OutcomeUnknown && r.HTTPStatus >= 300 && r.HTTPStatus < 400 {
		r.Outcome = executor.OutcomeFailed
	}
	return r
}

// laterRefusals is an HTTP executor with refusal-overrides' fixed defect
// within one call: a refusal after an earlier attempt of the call may have
// reached the downstream is FAILED. The executor makes such a refusal, and
// only it, an unknown outcome whose last answer is a status its tool
// declares definitive (cl): that is undone here. (Across calls, the
// defect is statements.OperationTransition's.)
type laterRefusals struct {
	*executor.HTTP
	cl executor.Classification
}

// Send is the HTTP executor's, with the refusal after an ambiguous
// attempt reported as the refusal it was.
func (e laterRefusals) Send(ctx context.Context, c executor.Call) executor.Result {
	res := e.HTTP.Send(ctx, c)
	if res.Outcome == executor.OutcomeUnknown && res.HTTPStatus != 0 && e.cl.Definitive(res.HTTPStatus) {
		res.Outcome = executor.OutcomeFailed
		if _, last, ok := strings.Cut(res.Detail, "last attempt: "); ok {
			res.Detail = last
		}
	}
	return res
}
