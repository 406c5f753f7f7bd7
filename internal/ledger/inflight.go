package ledger

import (
	"context"
	"sync"
	"time"
)

// inflight counts the attempts this process holds, from just before a
// statement that may hand it an operation (a claim, the one-call path's
// insert, a takeover) until the attempt's outcome is written. Only this
// process knows a downstream's answer until then, so a process that stops
// must wait for them (WaitAttempts) before it closes its database pool: an
// outcome lost that way becomes OUTCOME_UNKNOWN when the lease ends, for a
// call that answered.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n returns to 0
}

func (f *inflight) begin() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

func (f *inflight) end() {
	f.mu.Lock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
	f.mu.Unlock()
}

// attemptsBound is the longest an attempt can hold on: its call (bounded by
// the lease), then the outcome's write, retried while the database cannot
// be reached (OutcomeRetry), whose last try may start just before that ends
// and take its own bound.
func (l *Ledger) attemptsBound() time.Duration {
	return l.maxLease + l.cfg.OutcomeRetry + statementTimeout
}

// handing runs stmt, a statement that may hand this process an attempt,
// counted as an attempt in flight from before it starts (so a stopping
// process that finds none in flight cannot miss one about to begin). It
// reports whether stmt handed one over; then the count is the caller's to
// end once the attempt's outcome is written. Otherwise, or if stmt panics,
// it ends the count itself.
func (l *Ledger) handing(stmt func() bool) (handed bool) {
	l.attempts.begin()
	defer func() {
		if !handed {
			l.attempts.end()
		}
	}()
	return stmt()
}

// WaitAttempts waits until no attempt is in flight in this process, or ctx
// ends (its error then), or the longest an attempt can take passes: the
// longest lease, which bounds the downstream call, plus how long the
// outcome's write is retried while the database cannot be reached
// (attemptsBound). A process that is stopping calls it
// after its gRPC server stopped and before it closes the database pool. It
// returns how many attempts were still in flight when it gave up.
func (l *Ledger) WaitAttempts(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, l.attemptsBound())
	defer cancel()
	f := &l.attempts
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return 0, nil
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return 0, nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.n, ctx.Err()
	}
}
