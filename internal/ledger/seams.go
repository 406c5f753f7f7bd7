package ledger

import (
	"context"
	"time"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// The seams through which Hooks decorate the ledger (Hooks.Statements,
// Hooks.Send): the chaos build's failpoints and defect switches
// (proof/failpoint) sit there, so that the product neither imports them nor
// branches on them. A ledger without such hooks runs the defaults, which
// call the store and the executor as they are.

// Statements are the store statements a decorator may change: the claim of
// an Execute, the write of an attempt's outcome, the insert of a new
// operation, and the reservations of business identities and budget
// shares, each on the connection c it is given (the pool, or a
// transaction). The ledger runs these, and only these, through them;
// storeStatements, the default, runs them on the store.
type Statements interface {
	// OperationClaim is the claim of an Execute's round (claimOnce).
	OperationClaim(ctx context.Context, tenant, id string, cl store.Claim, lease store.Lease) (Operation, bool, error)
	// OperationTransition writes an attempt's outcome, or releases its
	// claim (commitOutcome).
	OperationTransition(ctx context.Context, t store.TransitionParams) (Operation, error)
	// OperationInsert inserts a prepared operation, taking its business
	// identity when n.TakeIdentity says so (insertOperation).
	OperationInsert(ctx context.Context, c *store.Conn, n store.NewOperation) (Operation, bool, error)
	// IdentityReserve takes a business identity for operation id (admitIn);
	// held reports that another key holds it.
	IdentityReserve(ctx context.Context, c *store.Conn, tenant, tool, identity, id, key string, window time.Duration) (held bool, err error)
	// BudgetReserve reserves the shares rs of limits (in the same order),
	// as PostgreSQL judges them on the locked budgets (reserve).
	BudgetReserve(ctx context.Context, c *store.Conn, limits []*tool.Limit, rs []store.Reservation, async bool) (store.Reserved, error)
	// BudgetReserveEach reserves the shares rs of several operations in
	// one budget of lim, each judged in turn on the locked budget, in a
	// statement that is a transaction of its own on c, the Store
	// (shareGroups).
	BudgetReserveEach(ctx context.Context, c *store.Conn, lim *tool.Limit, rs []store.Reservation) ([]store.Share, error)
}

// storeStatements are the Statements as the store runs them.
type storeStatements struct{ st *store.Store }

func (s storeStatements) OperationClaim(ctx context.Context, tenant, id string, cl store.Claim, lease store.Lease) (Operation, bool, error) {
	return s.st.OperationClaim(ctx, tenant, id, cl, lease)
}

func (s storeStatements) OperationTransition(ctx context.Context, t store.TransitionParams) (Operation, error) {
	return s.st.OperationTransition(ctx, t)
}

func (storeStatements) OperationInsert(ctx context.Context, c *store.Conn, n store.NewOperation) (Operation, bool, error) {
	return c.OperationInsert(ctx, n)
}

func (storeStatements) IdentityReserve(ctx context.Context, c *store.Conn, tenant, tool, identity, id, key string, window time.Duration) (bool, error) {
	return c.IdentityReserve(ctx, tenant, tool, identity, id, key, window)
}

func (storeStatements) BudgetReserve(ctx context.Context, c *store.Conn, _ []*tool.Limit, rs []store.Reservation, async bool) (store.Reserved, error) {
	return c.BudgetReserve(ctx, rs, async, false)
}

func (storeStatements) BudgetReserveEach(ctx context.Context, c *store.Conn, _ *tool.Limit, rs []store.Reservation) ([]store.Share, error) {
	return c.BudgetReserveEach(ctx, rs)
}

// SendFunc is an attempt's call of its downstream: op is the operation the
// attempt holds (its fence, and the timestamps its claim read), exec the
// executor of its tool, call what the executor is given; ctx bounds the
// call. The ledger's own (callDownstream) reports the call to the observer,
// the downstream span and the log around exec's Send; Hooks.Send may
// decorate it.
type SendFunc func(ctx context.Context, op Operation, exec executor.Executor, call executor.Call) executor.Result

// decorate sets the statements and the send the ledger runs: the defaults,
// decorated by h's.
func (l *Ledger) decorate(h *Hooks) {
	l.stmts, l.sendFn = storeStatements{l.store}, l.callDownstream
	if h == nil {
		return
	}
	if h.Statements != nil {
		l.stmts = h.Statements(l.stmts)
	}
	if h.Send != nil {
		l.sendFn = h.Send(l.sendFn)
	}
}

// BudgetRoom is how long until a share of amount fits in lim, given its uses
// (oldest first) read at now; ever is false when it never can. The ledger
// never admits on it (PostgreSQL judges every reservation on the locked
// budget): it explains a refusal (limitExceeded), and a decorator of
// Statements.BudgetReserve that decides in Go (the chaos build's
// budget-read defect) decides with the same arithmetic.
func BudgetRoom(lim *tool.Limit, uses []store.BudgetUse, now time.Time, amount float64) (wait time.Duration, ever bool) {
	return roomIn(lim, uses, now, amount)
}
