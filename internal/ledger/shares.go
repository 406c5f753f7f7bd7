package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// shareGroups sends the shares that this process's Prepares reserve in one
// budget apart from their insert (admit: a tool with one tenant-wide limit,
// every call's share on the same row) as few statements as it can: while a
// statement for a budget runs, the shares that arrive for it wait, and the
// next statement (BudgetReserveEach) carries all of them. A share that
// finds no statement running is sent at once, alone, so a quiet budget
// waits for nothing; a busy one is locked once per statement instead of
// once per call, which is what its calls queued on (docs/policy.md, "How a
// reservation is made"). Every share is still judged by PostgreSQL on the
// locked budget, in turn; the groups only decide which shares travel
// together.
type shareGroups struct {
	// send runs one statement for shares of one budget (the ledger's
	// Statements.BudgetReserveEach on the Store).
	send func(ctx context.Context, lim *tool.Limit, rs []store.Reservation) ([]store.Share, error)

	mu sync.Mutex
	// waiting holds, per budget with a statement running, the shares that
	// arrived since it was sent; a budget without one has no entry.
	waiting map[shareKey][]*shareCall
}

// shareKey is a budget and the bounds its shares are judged by: only shares
// judged alike travel in one statement.
type shareKey struct {
	tenant, name, scope string
	maxCount, maxUses   int
	hasSum, force       bool
	maxSum              float64
	window              int64
}

func keyOf(r store.Reservation) shareKey {
	return shareKey{tenant: r.Tenant, name: r.Name, scope: r.Scope, maxCount: r.MaxCount, maxUses: r.MaxUses,
		hasSum: r.HasSum, force: r.Force, maxSum: r.MaxSum, window: int64(r.Window)}
}

// shareCall is one Prepare's share waiting for a statement.
type shareCall struct {
	lim *tool.Limit
	r   store.Reservation
	// done receives the share's outcome, or the batch this call is to send
	// itself (lead: it is first in it).
	done chan shareOutcome
}

type shareOutcome struct {
	share store.Share
	err   error
	lead  []*shareCall
}

// errShareNotSent answers the shares of a statement whose sender panicked.
var errShareNotSent = errors.New("ledger: a budget reservation's statement did not run")

func newShareGroups(send func(ctx context.Context, lim *tool.Limit, rs []store.Reservation) ([]store.Share, error)) *shareGroups {
	return &shareGroups{send: send, waiting: map[shareKey][]*shareCall{}}
}

// reserve reserves r, one operation's share of lim's budget, and returns what
// PostgreSQL made of it. It waits for the statement that carries it, which
// is not cancelled with ctx: a share may be taken by a statement another
// call sends, and the caller must learn it, to release it if it gave up
// meanwhile (admit).
func (g *shareGroups) reserve(ctx context.Context, lim *tool.Limit, r store.Reservation) (store.Share, error) {
	k := keyOf(r)
	g.mu.Lock()
	if q, running := g.waiting[k]; running {
		c := &shareCall{lim: lim, r: r, done: make(chan shareOutcome, 1)}
		g.waiting[k] = append(q, c)
		g.mu.Unlock()
		out := <-c.done
		if out.lead == nil {
			return out.share, out.err
		}
		return g.run(ctx, k, out.lead)
	}
	g.waiting[k] = nil
	g.mu.Unlock()
	return g.run(ctx, k, []*shareCall{{lim: lim, r: r}})
}

// run sends batch (its first call is the caller's own), answers the others,
// and hands the shares that arrived meanwhile to the first of them, which
// sends them next; with none, the budget has no statement running. It
// returns the caller's outcome.
func (g *shareGroups) run(ctx context.Context, k shareKey, batch []*shareCall) (share store.Share, err error) {
	answered := false
	defer func() {
		if !answered {
			// send panicked: the others must not wait forever, and the
			// budget must not stay marked as running.
			for _, c := range batch[1:] {
				c.done <- shareOutcome{err: errShareNotSent}
			}
			g.handOff(k)
		}
	}()
	rs := make([]store.Reservation, len(batch))
	for i, c := range batch {
		rs[i] = c.r
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statementTimeout)
	out, err := g.send(sctx, batch[0].lim, rs)
	cancel()
	if err == nil && len(out) != len(batch) {
		err = fmt.Errorf("ledger: %d outcomes for a statement of %d budget shares", len(out), len(batch))
	}
	answered = true
	for i, c := range batch[1:] {
		if err != nil {
			c.done <- shareOutcome{err: err}
		} else {
			c.done <- shareOutcome{share: out[i+1]}
		}
	}
	g.handOff(k)
	if err != nil {
		return store.ShareRefused, err
	}
	return out[0], nil
}

// handOff passes the shares waiting for budget k to the first of them, to
// send; with none, k has no statement running.
func (g *shareGroups) handOff(k shareKey) {
	g.mu.Lock()
	next := g.waiting[k]
	if len(next) == 0 {
		delete(g.waiting, k)
		g.mu.Unlock()
		return
	}
	g.waiting[k] = nil
	g.mu.Unlock()
	next[0].done <- shareOutcome{lead: next}
}
