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
// limits or an identity runs in one transaction: the identity is taken
// (IdentityReserve), each budget's share reserved (BudgetReserve), then the
// operation inserted; the reservations commit with it or not at all. Each
// reservation is one statement whose WHERE, judged on the locked row's
// newest version, admits it or not: the decision is PostgreSQL's, never a
// read in Go. Shares and identities are released by the statement that
// ends the operation (migration 0015's trigger).

// admission is what a new operation reserved.
type admission struct {
	names, scopes []string
	identity      string
	// over is the first limit with `over: approve` the call went past: the
	// operation needs an approval it would not otherwise need.
	over *tool.Limit
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

// admit reserves, in c's transaction, the identity and budget shares of a
// new operation id (idempotency key key) of t with args, prepared by who.
func (l *Ledger) admit(ctx context.Context, c *store.Conn, t *tool.Tool, who Actor, args *structpb.Struct, id, key string) (admission, error) {
	var adm admission
	in := tool.RuleInput{Args: args, Tenant: who.Tenant, Principal: tool.Principal{ID: who.ID, Name: who.Name, Roles: who.Roles}}
	if t.Identity != nil {
		v, err := t.Identity.Value(t, in)
		if err != nil {
			return adm, ruleRefusal(t, err)
		}
		held, err := c.IdentityReserve(ctx, who.Tenant, t.Name, v, id, key, t.Identity.Window)
		if err != nil {
			return adm, err
		}
		if held {
			holder, err := c.IdentityHolder(ctx, who.Tenant, t.Name, v)
			if err != nil {
				return adm, err
			}
			l.obs.LimitRefused("identity:" + t.Name)
			return adm, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_OPERATION_DUPLICATE,
				Message: fmt.Sprintf("%s for %s %q is already being done or done (operation %s, under another idempotency key); "+
					"nothing was stored: Get %s for its outcome instead of trying again", t.Name, t.Identity.Key, v, holder, holder),
				Metadata: map[string]string{"operation_id": holder, "identity": v}}
		}
		adm.identity = v
	}
	// One lock order for every statement: by limit name.
	limits := slices.Clone(t.Limits)
	slices.SortFunc(limits, func(a, b *tool.Limit) int { return strings.Compare(a.Name, b.Name) })
	for _, lim := range limits {
		scope, err := lim.Scope(t, in)
		if err != nil {
			return adm, ruleRefusal(t, err)
		}
		amount, err := lim.Amount(t, in)
		if err != nil {
			return adm, ruleRefusal(t, err)
		}
		r := reservation(lim, who.Tenant, scope, id, amount)
		admitted, fits, err := c.BudgetReserve(ctx, r)
		if err != nil {
			return adm, err
		}
		if !admitted {
			l.obs.LimitRefused(lim.Name)
			return adm, l.limitExceeded(ctx, c, lim, r)
		}
		l.obs.LimitUsed(lim.Name)
		if !fits && adm.over == nil {
			adm.over = lim
		}
		adm.names, adm.scopes = append(adm.names, lim.Name), append(adm.scopes, scope)
	}
	return adm, nil
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
	for i, name := range op.BudgetNames {
		lim := l.limit(name)
		if lim == nil || i >= len(op.BudgetScopes) {
			continue
		}
		amount, err := lim.Amount(t, in)
		if err != nil {
			return ruleRefusal(t, err)
		}
		r := reservation(lim, op.Tenant, op.BudgetScopes[i], op.ID, amount)
		admitted, _, err := c.BudgetReserve(ctx, r)
		if err != nil {
			return err
		}
		if !admitted {
			l.obs.LimitRefused(lim.Name)
			err := l.limitExceeded(ctx, c, lim, r)
			var le *Error
			if errors.As(err, &le) {
				le.Message = "its approval lapsed and released its share, and the budget has no room for it now; the approval was not recorded: " + le.Message
				le.Metadata["operation_id"] = op.ID
			}
			return err
		}
	}
	return nil
}
