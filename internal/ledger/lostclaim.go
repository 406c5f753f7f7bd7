package ledger

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// leaseOwner names one attempt of this process: the server's id, a random
// name of this process (two replicas may be given the same server id) and
// a sequence number, so that an attempt whose claim's answer was lost can
// tell its own claim from any other attempt's (recoverClaim).
func (l *Ledger) leaseOwner() string {
	return l.ownerPrefix + strconv.FormatUint(l.attemptSeq.Add(1), 36)
}

// holdsLease reports whether owner is one of this process's attempts.
func (l *Ledger) holdsLease(owner string) bool {
	return strings.HasPrefix(owner, l.ownerPrefix)
}

// lostClaimWindow bounds how long recoverClaim looks for a claim whose
// answer was lost: the statement's own bound, and a margin for the
// database to come back.
const lostClaimWindow = statementTimeout + 5*time.Second

// recoverClaim handles a statement that may have handed this process an
// operation (a claim, the one-call path's insert) but whose answer was
// lost with its connection: if it committed, the operation is EXECUTING
// under owner's lease, which no attempt of this process runs. Nothing was
// sent, so it is released (READY, the approval not consumed), as a claim
// this process will not run is; left alone, the lease's end would make it
// OUTCOME_UNKNOWN for a downstream without deduplication or lookup, or let
// a takeover count it as sent. It looks in the background, counted as an
// attempt in flight, for up to lostClaimWindow; a claim that commits later
// than that is left to its lease's end.
func (l *Ledger) recoverClaim(tenant, id, owner string) {
	l.attempts.begin()
	go func() {
		defer l.attempts.end()
		ctx := context.Background()
		giveUp := time.Now().Add(lostClaimWindow)
		wait := 100 * time.Millisecond
		for {
			rctx, cancel := context.WithTimeout(ctx, statementTimeout)
			op, err := l.store.OperationGet(rctx, tenant, id)
			cancel()
			if err == nil && State(op.State) == StateExecuting && op.LeaseOwner == owner {
				l.opLogger(op).Warn("a claim's answer was lost with its connection; releasing it unsent")
				l.releaseUnsent(ctx, op, "the claim's answer was lost with its connection before anything was sent")
				return
			}
			// Not (yet) ours: the statement did not commit, or has not yet
			// (it may still wait for a lock), or the database is away.
			// Another attempt holding it now changes nothing: the owner
			// names ours alone.
			if time.Now().Add(wait).After(giveUp) {
				return
			}
			time.Sleep(wait)
			wait = min(2*wait, time.Second)
		}
	}()
}
