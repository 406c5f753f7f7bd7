package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// notifyChannel is the channel the operation_rules trigger (migration 0010)
// notifies with the operation id when an attempt that an Execute of another
// replica waits for ends (the operation left EXECUTING with waited set).
const notifyChannel = "opledger_operation"

// Listener turns PostgreSQL notifications about operations into wake-ups for
// callers waiting in this process. A wake-up only means "read again": the
// database stays the source of truth, and waiters also re-read on a timer in
// case a notification is lost while the listener reconnects.
type Listener struct {
	url    string
	logger *slog.Logger

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// NewListener returns a listener for the database at url; call Run.
func NewListener(url string, logger *slog.Logger) *Listener {
	return &Listener{url: url, logger: logger, waiters: map[string]map[chan struct{}]struct{}{}}
}

// Subscribe returns a channel that receives a value after the operation's
// state changes, and a function to stop listening.
func (l *Listener) Subscribe(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	set := l.waiters[id]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		l.waiters[id] = set
	}
	set[ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.waiters[id], ch)
		if len(l.waiters[id]) == 0 {
			delete(l.waiters, id)
		}
		l.mu.Unlock()
	}
}

// Wake wakes this process's waiters on an operation, as a notification
// would: for a change made by this process, whose waiters need no
// round trip through PostgreSQL.
func (l *Listener) Wake(id string) { l.wake(id, false) }

func (l *Listener) wake(id string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !all {
		notify(l.waiters[id])
		return
	}
	for _, set := range l.waiters {
		notify(set)
	}
}

func notify(set map[chan struct{}]struct{}) {
	for ch := range set {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Run listens until ctx ends, reconnecting with backoff after errors; after
// every reconnect it wakes all waiters, since notifications may have been
// missed meanwhile. With a multi-host URL the reconnect finds the new
// primary after a failover (target_session_attrs=read-write) and listens
// there.
func (l *Listener) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		connected, err := l.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = 100 * time.Millisecond
		}
		l.logger.Warn("notification listener lost its connection; reconnecting", "error", err, "backoff", backoff)
		l.wake("", true)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenLiveness is how long the listening connection may stay silent
// before it is pinged, and how long the ping may take. A connection to a
// primary that vanished in a network partition (no reset, no FIN) would
// otherwise wait for notifications that can never come until TCP gives up,
// which takes many minutes, while the new primary's notifications go
// unheard.
const listenLiveness = 5 * time.Second

// listenOnce listens on one connection until it fails; connected reports
// that LISTEN had succeeded on it.
func (l *Listener) listenOnce(ctx context.Context) (connected bool, err error) {
	conn, err := pgx.Connect(ctx, l.url)
	if err != nil {
		return false, interpretError(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return false, interpretError(err)
	}
	l.wake("", true)
	for {
		wctx, cancel := context.WithTimeout(ctx, listenLiveness)
		n, err := conn.WaitForNotification(wctx)
		silent := wctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			l.wake(n.Payload, false)
			continue
		case ctx.Err() != nil:
			return true, ctx.Err()
		case !silent:
			return true, interpretError(err)
		}
		pctx, cancel := context.WithTimeout(ctx, listenLiveness)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return true, fmt.Errorf("%w: the listening connection did not answer a ping within %s", ErrUnavailable, listenLiveness)
		}
	}
}
