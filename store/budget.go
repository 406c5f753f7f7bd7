package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/store/internal/db"
)

// Reservation is one operation's share of one budget (BudgetReserve).
type Reservation struct {
	Tenant, Name, Scope, OperationID string
	// Amount is the share of the sum (0 without one).
	Amount float64
	// MaxCount bounds the operations in the window (0: none); MaxSum the
	// total, with HasSum.
	MaxCount int
	HasSum   bool
	MaxSum   float64
	Window   time.Duration
	// MaxUses bounds the entries one budget holds.
	MaxUses int
	// Force takes the share whether it fits or not (`over: approve`).
	Force bool
}

// Reserved is what BudgetReserve did: Refused is the index of the
// reservation that did not fit (nothing was reserved), Over the first one
// taken past its limit by Force; -1 for none.
type Reserved struct{ Refused, Over int }

// BudgetReserve reserves the shares rs (of one operation and tenant, sorted
// by Name: the lock order) all or none. With async, c must be the Store (a
// transaction of its own): the reservation commits without waiting for the
// flush, and its operation's synchronous commit after it makes it durable
// (migration 0016); in a transaction, async must be false. With renew (an
// approval renewing a lapsed one) a share the operation holds already is
// admitted as it is.
func (c *Conn) BudgetReserve(ctx context.Context, rs []Reservation, async, renew bool) (Reserved, error) {
	if len(rs) == 0 {
		return Reserved{Refused: -1, Over: -1}, nil
	}
	p := db.BudgetReserveParams{Tenant: rs[0].Tenant, OpID: rs[0].OperationID, MaxUses: int32(rs[0].MaxUses), Async: async, Renew: renew}
	for _, r := range rs {
		p.Names, p.Scopes, p.Amounts = append(p.Names, r.Name), append(p.Scopes, r.Scope), append(p.Amounts, r.Amount)
		p.MaxCounts, p.HasSums, p.MaxSums = append(p.MaxCounts, int32(r.MaxCount)), append(p.HasSums, r.HasSum), append(p.MaxSums, r.MaxSum)
		p.Windows, p.Forces = append(p.Windows, r.Window.Seconds()), append(p.Forces, r.Force)
	}
	out, err := c.q.BudgetReserve(ctx, c.dbtx, p)
	if err != nil {
		return Reserved{}, interpretError(err)
	}
	if len(out) != 2 {
		return Reserved{}, fmt.Errorf("store: budget_reserve returned %v", out)
	}
	return Reserved{Refused: int(out[0]), Over: int(out[1])}, nil
}

// Share is what BudgetReserveEach did with one operation's share.
type Share int8

const (
	// ShareRefused: nothing was reserved for the operation.
	ShareRefused Share = 0
	// ShareTaken: the share fits, and is counted.
	ShareTaken Share = 1
	// ShareOver: taken past the limit by Force (`over: approve`).
	ShareOver Share = 2
)

// BudgetReserveEach reserves the shares rs, one operation's each, all in one
// budget (the same tenant, name, scope and bounds), in one statement: each
// judged in turn on the locked budget as the shares before it left it
// (budget_reserve_each, migration 0023). Call it on the Store: the statement
// is a transaction of its own that commits without waiting for the flush,
// as BudgetReserve with async.
func (c *Conn) BudgetReserveEach(ctx context.Context, rs []Reservation) ([]Share, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	r0 := rs[0]
	p := db.BudgetReserveEachParams{Tenant: r0.Tenant, Name: r0.Name, Scope: r0.Scope, MaxCount: int32(r0.MaxCount),
		HasSum: r0.HasSum, MaxSum: r0.MaxSum, WindowSeconds: r0.Window.Seconds(), Force: r0.Force, MaxUses: int32(r0.MaxUses)}
	for _, r := range rs {
		if r.Tenant != r0.Tenant || r.Name != r0.Name || r.Scope != r0.Scope || r.MaxCount != r0.MaxCount ||
			r.HasSum != r0.HasSum || r.MaxSum != r0.MaxSum || r.Window != r0.Window || r.Force != r0.Force || r.MaxUses != r0.MaxUses {
			return nil, fmt.Errorf("store: BudgetReserveEach: shares of more than one budget or bound (%s/%s, %s/%s)", r0.Name, r0.Scope, r.Name, r.Scope)
		}
		p.OpIds, p.Amounts = append(p.OpIds, r.OperationID), append(p.Amounts, r.Amount)
	}
	out, err := c.q.BudgetReserveEach(ctx, c.dbtx, p)
	if err != nil {
		return nil, interpretError(err)
	}
	if len(out) != len(rs) {
		return nil, fmt.Errorf("store: budget_reserve_each returned %d outcomes for %d shares", len(out), len(rs))
	}
	shares := make([]Share, len(out))
	for i, o := range out {
		shares[i] = Share(o)
	}
	return shares, nil
}

// BudgetRelease takes operationID's shares out of the budgets names/scopes
// of tenant: a reservation whose operation was not stored.
func (c *Conn) BudgetRelease(ctx context.Context, tenant, operationID string, names, scopes []string) error {
	return interpretError(c.q.BudgetRelease(ctx, c.dbtx, db.BudgetReleaseParams{OpID: operationID, Tenant: tenant, Names: names, Scopes: scopes}))
}

// BudgetUse is one operation counted in a budget's window.
type BudgetUse struct {
	OperationID string    `json:"op"`
	At          float64   `json:"at"`
	Amount      float64   `json:"amount"`
	Time        time.Time `json:"-"`
}

// BudgetGet reads a budget's uses within the window, oldest first, and the
// database's clock they were judged on. A budget never used has none.
func (c *Conn) BudgetGet(ctx context.Context, tenant, name, scope string, window time.Duration) ([]BudgetUse, time.Time, error) {
	r, err := c.q.BudgetGet(ctx, c.dbtx, db.BudgetGetParams{Tenant: tenant, Name: name, Scope: scope, WindowSeconds: window.Seconds()})
	if err != nil {
		return nil, time.Time{}, interpretError(err)
	}
	var uses []BudgetUse
	if err := json.Unmarshal(r.Uses, &uses); err != nil {
		return nil, time.Time{}, err
	}
	for i := range uses {
		uses[i].Time = epoch(uses[i].At)
	}
	return uses, epoch(r.Now), nil
}

func epoch(s float64) time.Time {
	return time.Unix(0, int64(s*1e9)).UTC()
}

// IdentityReserve takes a tool's business identity for operationID unless
// another operation holds it; held reports that one does.
func (c *Conn) IdentityReserve(ctx context.Context, tenant, tool, identity, operationID, key string, window time.Duration) (held bool, err error) {
	_, err = c.q.IdentityReserve(ctx, c.dbtx, db.IdentityReserveParams{Tenant: tenant, Tool: tool, Identity: identity,
		OperationID: operationID, IdempotencyKey: key, WindowSeconds: window.Seconds()})
	if err = interpretError(err); errors.Is(err, ErrNotFound) {
		return true, nil
	}
	return false, err
}

// IdentityHolder returns the operation holding a business identity.
func (c *Conn) IdentityHolder(ctx context.Context, tenant, tool, identity string) (string, error) {
	id, err := c.q.IdentityHolder(ctx, c.dbtx, db.IdentityHolderParams{Tenant: tenant, Tool: tool, Identity: identity})
	return id, interpretError(err)
}

// BudgetPrune deletes up to batch budgets nothing in which counts any more.
func (c *Conn) BudgetPrune(ctx context.Context, batch int32) (int64, error) {
	n, err := c.q.BudgetPrune(ctx, c.dbtx, batch)
	return n, interpretError(err)
}

// IdentityPrune deletes up to batch business identities that are free.
func (c *Conn) IdentityPrune(ctx context.Context, batch int32) (int64, error) {
	n, err := c.q.IdentityPrune(ctx, c.dbtx, batch)
	return n, interpretError(err)
}

// IdentityGet reads who holds a tool's business identity: the holder and
// its idempotency key, and whether it is held now (false, "" when no row).
// It decides nothing: only the chaos suite's identity-select control run
// decides on it (see IdentityTake).
func (c *Conn) IdentityGet(ctx context.Context, tenant, tool, identity string) (holder, key string, held bool, err error) {
	r, err := c.q.IdentityGet(ctx, c.dbtx, db.IdentityGetParams{Tenant: tenant, Tool: tool, Identity: identity})
	if err = interpretError(err); errors.Is(err, ErrNotFound) {
		return "", "", false, nil
	}
	return r.OperationID, r.IdempotencyKey, r.Held, err
}

// IdentityTake takes a tool's business identity for operationID whoever
// holds it, without IdentityReserve's guard. Only the chaos suite's
// identity-select control run (proof/failpoint, failpoints builds) calls it, after
// IdentityGet, to prove that its checker catches an identity checked by a
// read in Go.
func (c *Conn) IdentityTake(ctx context.Context, tenant, tool, identity, operationID, key string, window time.Duration) error {
	return interpretError(c.q.IdentityTake(ctx, c.dbtx, db.IdentityTakeParams{Tenant: tenant, Tool: tool, Identity: identity,
		OperationID: operationID, IdempotencyKey: key, WindowSeconds: window.Seconds()}))
}
