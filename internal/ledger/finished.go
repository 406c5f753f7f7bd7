package ledger

import (
	"time"
)

type opKey struct{ tenant, id string }

// finished is a cached finished operation and its answer form.
type finished struct {
	op      Operation
	encoded any
}

// SetEncoder installs the function that computes the form in which an
// operation is answered (the server's wire encoding). The finished-
// operation cache keeps that form with the operation, so a replay is
// answered without encoding it again. Call it before serving.
func (l *Ledger) SetEncoder(encode func(Operation) any) { l.encode = encode }

// Encoded returns the answer form of op kept in the finished-operation
// cache, or nil when the cache holds no such copy of op.
func (l *Ledger) Encoded(op Operation) any {
	f, ok := l.finished.Get(opKey{op.Tenant, op.ID})
	if !ok || !f.op.UpdatedAt.Equal(op.UpdatedAt) {
		return nil
	}
	return f.encoded
}

// remember caches op if it is finished: nothing can change it any more
// (the state machine has no edge out of a terminal state), until the pruner
// deletes it, which the entry's deadline anticipates. asked is this
// process's clock just before the statement that returned op was sent:
// op.DBNow is that statement's start, which may be long before it returned
// (a wait for the row lock), so what is left is counted from asked.
func (l *Ledger) remember(op Operation, asked time.Time) {
	if !State(op.State).Terminal() {
		return
	}
	// Every Get of a finished operation comes here: a copy already held
	// is the same operation, so only a missing one takes the write lock.
	key := opKey{op.Tenant, op.ID}
	if _, ok := l.finished.Get(key); ok {
		return
	}
	// The pruner deletes it once its age passes the retention, on the
	// database's clock: the copy goes no later, whatever this process's
	// clock says.
	if op.DBNow.IsZero() {
		return
	}
	ttl := min(l.cfg.FinishedCacheTTL, op.UpdatedAt.Add(l.cfg.Retention).Sub(op.DBNow))
	if ttl <= 0 {
		return
	}
	f := finished{op: op}
	if l.encode != nil {
		f.encoded = l.encode(op)
	}
	l.finished.Put(key, f, asked.Add(ttl))
}
