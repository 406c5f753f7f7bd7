package store

import (
	"context"
	"encoding/json"
	"errors"
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

// BudgetReserve reserves r if it fits, in the caller's transaction, and
// reports whether it did (admitted) and, with Force, whether it fitted.
func (c *Conn) BudgetReserve(ctx context.Context, r Reservation) (admitted, fits bool, err error) {
	fits, err = c.q.BudgetReserve(ctx, c.dbtx, db.BudgetReserveParams{
		Tenant: r.Tenant, Name: r.Name, Scope: r.Scope, OpID: r.OperationID, Amount: r.Amount, Force: r.Force,
		MaxCount: int32(r.MaxCount), HasSum: r.HasSum, MaxSum: r.MaxSum, WindowSeconds: r.Window.Seconds(), MaxUses: int32(r.MaxUses),
	})
	if err = interpretError(err); errors.Is(err, ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, fits, nil
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
