package ledger

import "time"

// liveTTL bounds how long a claimable operation's copy is kept for the
// Execute that follows its Prepare or approval, and maxLive how many are
// kept: a copy lives from its write to the next Execute, usually
// milliseconds, and its args may be as large as a tool allows.
const (
	liveTTL = 5 * time.Minute
	maxLive = 4096
)

// holdLive keeps op, as this process just wrote it, if an Execute can claim
// it (READY): that Execute's claim then returns only the columns it changes
// and takes the rest from this copy (store.Claim.Base; docs/performance.md,
// finding 32). A copy that is no longer current (the operation changed
// through another replica) costs the claim a read, never a wrong row: the
// store compares the copy's event count with the row's.
func (l *Ledger) holdLive(op Operation) {
	if State(op.State) != StateReady || op.Events == 0 {
		return
	}
	l.live.Put(opKey{op.Tenant, op.ID}, op, time.Now().Add(liveTTL))
}

// takeLive returns and forgets the copy of the operation held for its
// Execute: one claim uses it; later ones read the row.
func (l *Ledger) takeLive(tenant, id string) (Operation, bool) {
	k := opKey{tenant, id}
	op, ok := l.live.Get(k)
	if ok {
		l.live.Delete(k)
	}
	return op, ok
}
