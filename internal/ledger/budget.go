package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// Budgets and business identity (docs/policy.md). A Prepare of a tool with
// one limit, per key, reserves its budget share in the statement that
// inserts the operation and takes its identity (insertReserving,
// OperationInsertReserving). One with a tenant-wide limit or several
// limits, or whose share did not fit there, reserves them first, in one
// statement that is a transaction of its own (BudgetReserve, async: it
// holds each budget's lock for microseconds, not for a commit's flush),
// then inserts the operation,
// whose statement also takes its business identity (OperationInsert with
// TakeIdentity). A Prepare whose operation is not stored (refused, or its
// key taken) releases the shares it reserved. Each reservation is judged by
// PostgreSQL on the locked budget as its last holder left it, never on a
// read in Go. An approval with edits, and an approval renewing a lapsed one,
// reserve in their own transaction instead (admitIn, reserveAgain). Shares
// and identities are released by the statement that ends the operation
// (migration 0015's trigger, 0016's functions).

// admission is what a new operation reserves.
type admission struct {
	names, scopes []string
	identity      string
	// over is the first limit with `over: approve` the call went past: the
	// operation needs an approval it would not otherwise need.
	over *tool.Limit
	// reserved: the shares were reserved by a statement of their own, which
	// the Prepare releases if its operation is not stored.
	reserved bool
}

// reservesInInsert reports whether a Prepare of t reserves its budget share
// in its insert's own statement (OperationInsertReserving): t has one limit,
// per key. Such a budget is shared by the calls of one key (a customer, an
// agent), so the insert may hold its lock to the commit; a tenant-wide
// budget is shared by every call, and is reserved in a statement of its own
// that holds the lock for microseconds (admit). A tool with several limits
// reserves them all or none in a statement of its own too (admit): one
// share is the insert's scalars, several would be arrays, whose reading
// costs PostgreSQL more than the scalars save (docs/performance.md, finding
// 45).
func reservesInInsert(t *tool.Tool) bool {
	return len(t.Limits) == 1 && t.Limits[0].Per != ""
}

// insertReserving inserts n with its budget share and its identity in one
// statement: stored with both, or nothing is (ErrSharesDoNotFit when
// the share does not fit as its budget stands; not inserted when the key is
// taken or another key holds the identity, which it then refuses).
func (l *Ledger) insertReserving(ctx context.Context, a Actor, t *tool.Tool, args *structpb.Struct, n *store.NewOperation) (Operation, bool, error) {
	identity, rs, limits, err := claims(t, a, args, n.ID)
	if err != nil {
		return Operation{}, false, err
	}
	n.Reserve = &rs[0]
	n.BudgetNames, n.BudgetScopes = []string{rs[0].Name}, []string{rs[0].Scope}
	if identity != "" {
		n.Identity, n.TakeIdentity, n.IdentityWindow = identity, true, t.Identity.Window
	}
	op, inserted, err := l.insertOperation(ctx, a, n)
	switch {
	case err == nil && inserted:
		for _, lim := range limits {
			l.obs.LimitUsed(lim.Name)
		}
	case err == nil && n.TakeIdentity:
		// Not inserted: the key is taken, or another operation holds the
		// identity.
		holder, key, held, gerr := l.store.IdentityGet(ctx, a.Tenant, t.Name, n.Identity)
		if gerr == nil && held && key != n.IdempotencyKey {
			err = l.duplicate(t, n.Identity, holder)
		}
	}
	return op, inserted, err
}

// needsIdentityOrBudget reports whether a Prepare of t reserves anything.
func needsIdentityOrBudget(t *tool.Tool) bool { return t.Identity != nil || len(t.Limits) > 0 }

// ruleRefusal is a limit's or identity's expression that cannot be
// evaluated for a call: the args do not give it what it needs.
func ruleRefusal(t *tool.Tool, err error) error {
	var re *tool.RuleError
	if !errors.As(err, &re) {
		return err
	}
	return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: "args",
		Message:  fmt.Sprintf("%s@%s: %s; nothing was stored", t.Name, t.Version, re.Error()),
		Metadata: map[string]string{"rule": re.Rule}}
}

// claims evaluates t's identity and limits for a call of operation id with
// args by who: the identity's value ("" without one), and the shares to
// reserve with their limits, in lock order (by limit name).
func claims(t *tool.Tool, who Actor, args *structpb.Struct, id string) (string, []store.Reservation, []*tool.Limit, error) {
	in := t.Bind(tool.RuleInput{Args: args, Tenant: who.Tenant, Principal: tool.Principal{ID: who.ID, Name: who.Name, Roles: who.Roles}})
	var identity string
	if t.Identity != nil {
		v, err := t.Identity.Value(t, in)
		if err != nil {
			return "", nil, nil, ruleRefusal(t, err)
		}
		identity = v
	}
	limits := slices.Clone(t.Limits)
	slices.SortFunc(limits, func(a, b *tool.Limit) int { return strings.Compare(a.Name, b.Name) })
	rs := make([]store.Reservation, 0, len(limits))
	for _, lim := range limits {
		scope, err := lim.Scope(t, in)
		if err != nil {
			return "", nil, nil, ruleRefusal(t, err)
		}
		amount, err := lim.Amount(t, in)
		if err != nil {
			return "", nil, nil, ruleRefusal(t, err)
		}
		rs = append(rs, reservation(lim, who.Tenant, scope, id, amount))
	}
	return identity, rs, limits, nil
}

// admit reserves the budget shares of a new operation id of t with args,
// prepared by who, in a statement of its own, and says which identity the
// operation's insert is to take.
func (l *Ledger) admit(ctx context.Context, t *tool.Tool, who Actor, args *structpb.Struct, id string) (admission, error) {
	identity, rs, limits, err := claims(t, who, args, id)
	if err != nil {
		return admission{}, err
	}
	adm := admission{identity: identity}
	if len(rs) == 0 {
		return adm, nil
	}
	if len(rs) == 1 {
		err = l.reserveOne(ctx, limits[0], rs[0], &adm)
	} else {
		err = l.reserve(ctx, &l.store.Conn, limits, rs, true, &adm)
	}
	if err != nil {
		return admission{}, err
	}
	adm.reserved = true
	return adm, nil
}

// reserveOne reserves r, a new operation's one share (of lim's budget), in
// a statement of its own that carries the other shares waiting for that
// budget (shareGroups), and records in adm what it reserved, or refuses.
func (l *Ledger) reserveOne(ctx context.Context, lim *tool.Limit, r store.Reservation, adm *admission) error {
	share, err := l.shares.reserve(ctx, lim, r)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil && share != store.ShareRefused {
		// The caller gave up while its share waited for its batch's
		// statement, which took it: no operation will be stored for it,
		// so the share goes back now rather than count until its window
		// ends.
		l.release(ctx, r.Tenant, r.OperationID, admission{reserved: true, names: []string{lim.Name}, scopes: []string{r.Scope}})
		return err
	}
	res := store.Reserved{Refused: -1, Over: -1}
	switch share {
	case store.ShareRefused:
		res.Refused = 0
	case store.ShareOver:
		res.Over = 0
	}
	return l.admitted(ctx, &l.store.Conn, []*tool.Limit{lim}, []store.Reservation{r}, res, adm)
}

// admitIn reserves, in c's transaction, the identity and budget shares of a
// new operation id (idempotency key key) of t with args, prepared by who:
// an approval with edits, whose operation is born in the transaction that
// ends the original.
func (l *Ledger) admitIn(ctx context.Context, c *store.Conn, t *tool.Tool, who Actor, args *structpb.Struct, id, key string) (admission, error) {
	identity, rs, limits, err := claims(t, who, args, id)
	if err != nil {
		return admission{}, err
	}
	// The budgets first, then the identity: the order of the insert that
	// reserves (OperationInsertReserving) and of the trigger that releases
	// both when an operation ends.
	var adm admission
	if err := l.reserve(ctx, c, limits, rs, false, &adm); err != nil {
		return admission{}, err
	}
	if identity != "" {
		held, err := l.stmts.IdentityReserve(ctx, c, who.Tenant, t.Name, identity, id, key, t.Identity.Window)
		if err != nil {
			return admission{}, err
		}
		if held {
			holder, err := c.IdentityHolder(ctx, who.Tenant, t.Name, identity)
			if err != nil {
				return admission{}, err
			}
			return admission{}, l.duplicate(t, identity, holder)
		}
		adm.identity = identity
	}
	return adm, nil
}

// reserve reserves rs (for limits, in the same order) on c, and records in
// adm what it reserved, or refuses with the limit that has no room.
func (l *Ledger) reserve(ctx context.Context, c *store.Conn, limits []*tool.Limit, rs []store.Reservation, async bool, adm *admission) error {
	res, err := l.stmts.BudgetReserve(ctx, c, limits, rs, async)
	if err != nil {
		return err
	}
	return l.admitted(ctx, c, limits, rs, res, adm)
}

// admitted records in adm the shares rs (for limits) that res says were
// reserved, or refuses with the limit that had no room.
func (l *Ledger) admitted(ctx context.Context, c *store.Conn, limits []*tool.Limit, rs []store.Reservation, res store.Reserved, adm *admission) error {
	if res.Refused >= 0 {
		l.obs.LimitRefused(limits[res.Refused].Name)
		return l.limitExceeded(ctx, c, limits[res.Refused], rs[res.Refused])
	}
	for i, lim := range limits {
		l.obs.LimitUsed(lim.Name)
		adm.names, adm.scopes = append(adm.names, lim.Name), append(adm.scopes, rs[i].Scope)
	}
	if res.Over >= 0 {
		adm.over = limits[res.Over]
	}
	return nil
}

// release takes back the shares adm reserved for operation id of tenant,
// whose operation was not stored. Best effort: a share it fails to release
// stays counted until its window ends (conservative, never over).
func (l *Ledger) release(ctx context.Context, tenant, id string, adm admission) {
	if !adm.reserved {
		return
	}
	if err := l.store.BudgetRelease(context.WithoutCancel(ctx), tenant, id, adm.names, adm.scopes); err != nil {
		l.logger.Warn("a budget reservation of an operation never stored could not be released; it counts until its window ends",
			"operation_id", id, "err", err)
	}
}

// duplicate is the refusal of a Prepare whose business identity another
// operation holds.
func (l *Ledger) duplicate(t *tool.Tool, identity, holder string) error {
	l.obs.LimitRefused("identity:" + t.Name)
	return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_DUPLICATE,
		Message: fmt.Sprintf("%s for %s %q is already being done or done (operation %s, under another idempotency key); "+
			"nothing was stored: Get %s for its outcome instead of trying again", t.Name, t.Identity.Key, identity, holder, holder),
		Metadata: map[string]string{"operation_id": holder, "identity": identity}}
}

// reservation is an operation's share of lim's budget for scope: a limit
// with `over: approve` takes it whether it fits or not.
func reservation(lim *tool.Limit, tenant, scope, id string, amount float64) store.Reservation {
	return store.Reservation{Tenant: tenant, Name: lim.Name, Scope: scope, OperationID: id, Amount: amount,
		MaxCount: lim.Count, HasSum: lim.Sum != "", MaxSum: lim.Max, Window: lim.Window, MaxUses: tool.MaxLimitUses,
		Force: lim.Over == tool.OverApprove}
}

// limitExceeded is the refusal of a call past lim, with when room frees up
// (read after the refusal, for the answer only).
func (l *Ledger) limitExceeded(ctx context.Context, c *store.Conn, lim *tool.Limit, r store.Reservation) error {
	le := &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_LIMIT_EXCEEDED,
		Metadata: map[string]string{"limit": lim.Name, "window": lim.Window.String()}}
	what := describeLimit(lim)
	if r.Scope != "" {
		le.Metadata["scope"] = r.Scope
		what += " per " + lim.Per + " (" + r.Scope + ")"
	}
	uses, now, err := c.BudgetGet(ctx, r.Tenant, r.Name, r.Scope, lim.Window)
	if err != nil {
		return err
	}
	wait, ever := roomIn(lim, uses, now, r.Amount)
	switch {
	case !ever:
		le.Message = fmt.Sprintf("limit %s allows %s; this call alone is more than that, so it will never fit; nothing was stored", lim.Name, what)
	default:
		le.RetryAfter = max(wait, time.Second)
		le.Message = fmt.Sprintf("limit %s allows %s; it is used up until %s (in %s); nothing was stored",
			lim.Name, what, now.Add(wait).UTC().Format(time.RFC3339), wait.Round(time.Second))
	}
	return le
}

// describeLimit says what a limit allows, for people and models.
func describeLimit(lim *tool.Limit) string {
	var parts []string
	if lim.Count > 0 {
		parts = append(parts, fmt.Sprintf("%d operations", lim.Count))
	}
	if lim.Sum != "" {
		parts = append(parts, fmt.Sprintf("a total %s of %v", lim.Sum, lim.Max))
	}
	return strings.Join(parts, " and ") + " within " + lim.Window.String()
}

// roomIn is how long until a share of amount fits in lim, given its uses
// (oldest first) read at now; ever is false when it never can.
func roomIn(lim *tool.Limit, uses []store.BudgetUse, now time.Time, amount float64) (wait time.Duration, ever bool) {
	if lim.Sum != "" && amount > lim.Max {
		return 0, false
	}
	// The first k entries must expire: for the count, so that one more fits;
	// for the sum, so that the rest and this amount fit.
	k := 0
	if lim.Count > 0 && len(uses)+1 > lim.Count {
		k = len(uses) + 1 - lim.Count
	}
	if lim.Sum != "" {
		total := 0.0
		for _, u := range uses {
			total += u.Amount
		}
		j := 0
		for ; j < len(uses) && total+amount > lim.Max; j++ {
			total -= uses[j].Amount
		}
		k = max(k, j)
	}
	if k == 0 || k > len(uses) {
		return 0, true
	}
	return max(uses[k-1].Time.Add(lim.Window).Sub(now), 0), true
}

// BudgetState is how much of one budget is used, for Get and the console.
type BudgetState struct {
	Limit    *tool.Limit
	Scope    string
	Count    int
	Sum      float64
	FreesAt  time.Time
	Observed time.Time
}

// Budgets reads the budgets op counts against, as they are now.
func (l *Ledger) Budgets(ctx context.Context, op Operation) ([]BudgetState, error) {
	var out []BudgetState
	for i, name := range op.BudgetNames {
		lim := l.limit(name)
		if lim == nil || i >= len(op.BudgetScopes) {
			continue // no longer declared on this server
		}
		uses, now, err := l.store.BudgetGet(ctx, op.Tenant, name, op.BudgetScopes[i], lim.Window)
		if err != nil {
			return nil, storeErr(err)
		}
		s := BudgetState{Limit: lim, Scope: op.BudgetScopes[i], Count: len(uses), Observed: now}
		for _, u := range uses {
			s.Sum += u.Amount
		}
		if len(uses) > 0 {
			s.FreesAt = uses[0].Time.Add(lim.Window)
		}
		out = append(out, s)
	}
	return out, nil
}

func (l *Ledger) limit(name string) *tool.Limit {
	for _, lim := range l.tools.Limits() {
		if lim.Name == name {
			return lim
		}
	}
	return nil
}

// reserveAgain takes op's budget shares again as an approval makes it READY
// in c's transaction: a share its lapsed approval released is reserved anew
// (and refused, with the approval, when the budget has no room now); one
// still held is left as it is (BudgetReserve admits an operation that holds
// a share).
func (l *Ledger) reserveAgain(ctx context.Context, c *store.Conn, op Operation) error {
	if len(op.BudgetNames) == 0 {
		return nil
	}
	b, ok := l.bound[op.Tool+"@"+op.ToolVersion]
	if !ok {
		return nil // no longer configured here: its limits cannot be evaluated
	}
	t := b.tool
	who, err := l.preparer(ctx, c, op)
	if err != nil {
		return err
	}
	var args structpb.Struct
	if err := protojson.Unmarshal(op.Args, &args); err != nil {
		return fmt.Errorf("ledger: stored args of %s: %w", op.ID, err)
	}
	in := tool.RuleInput{Args: &args, Tenant: op.Tenant, Principal: tool.Principal{ID: who.ID, Name: who.Name, Roles: who.Roles}}
	var limits []*tool.Limit
	var rs []store.Reservation
	for i, name := range op.BudgetNames {
		lim := l.limit(name)
		if lim == nil || i >= len(op.BudgetScopes) {
			continue
		}
		amount, err := lim.Amount(t, in)
		if err != nil {
			return ruleRefusal(t, err)
		}
		limits, rs = append(limits, lim), append(rs, reservation(lim, op.Tenant, op.BudgetScopes[i], op.ID, amount))
	}
	res, err := c.BudgetReserve(ctx, rs, false, true)
	if err != nil {
		return err
	}
	if res.Refused >= 0 {
		lim := limits[res.Refused]
		l.obs.LimitRefused(lim.Name)
		err := l.limitExceeded(ctx, c, lim, rs[res.Refused])
		var le *Error
		if errors.As(err, &le) {
			le.Message = "its approval lapsed and released its share, and the budget has no room for it now; the approval was not recorded: " + le.Message
			le.Metadata["operation_id"] = op.ID
		}
		return err
	}
	return nil
}
