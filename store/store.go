// Package store is opledger's only door to PostgreSQL: every SQL statement,
// the migrations, transactions and the mapping of database errors live here,
// and no other package imports pgx.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/opledger/opledger/store/internal/db"
)

// Errors returned by store methods; callers test them with errors.Is.
var (
	// ErrNotFound: no such row (a read, or a statement that reads the row
	// it reports on whatever its guards say).
	ErrNotFound = errors.New("store: not found")
	// ErrConditionFailed: a guarded statement changed nothing because a
	// guard refused (the row is not, or no longer, what the caller read:
	// its state, fence, lease, approval or policy moved on; or it is gone).
	// The caller reads the row again rather than retrying. Its errors are
	// *ConditionFailedError, which name the statement.
	ErrConditionFailed = errors.New("store: a guard refused the change")
	// ErrAlreadyExists: a unique constraint refused the row.
	ErrAlreadyExists = errors.New("store: already exists")
	// ErrRetry: a serialization failure or deadlock; InTx retries these.
	ErrRetry = errors.New("store: transaction must be retried")
	// ErrUnavailable: the database could not be reached.
	ErrUnavailable = errors.New("store: database unavailable")
	// ErrSharesDoNotFit: OperationInsert with NewOperation.Reserve found
	// that the share does not fit its budget as it stands (the limit
	// refuses, or an `over: approve` limit is gone past); nothing was
	// stored or reserved (SQLSTATE OL429). The caller reserves in a
	// statement of its own (BudgetReserve), which says which limit and
	// why.
	ErrSharesDoNotFit = errors.New("store: the budget shares do not fit")
)

// errKeyTaken is OperationInsert's statement undone because the operation's
// idempotency key was taken after it took the business identity
// (operation_admit_check, SQLSTATE OL409): OperationInsert reports "not
// inserted", as for any taken key.
var errKeyTaken = errors.New("store: the idempotency key is taken")

// ConditionFailedError is a guarded statement's refusal (ErrConditionFailed):
// Statement names it, so a log says which guard refused. A guarded UPDATE
// cannot tell a refusing guard from a row that is gone, and need not: both
// mean that the caller's copy is stale.
type ConditionFailedError struct {
	Statement string
}

// Error implements error.
func (e *ConditionFailedError) Error() string {
	return "store: " + e.Statement + ": a guard refused the change (the row moved on since it was read)"
}

// Is makes errors.Is(err, ErrConditionFailed) hold.
func (e *ConditionFailedError) Is(target error) bool { return target == ErrConditionFailed }

// guarded is interpretError for a guarded statement: no row means that a
// guard refused (ConditionFailedError), never ErrNotFound.
func guarded(statement string, err error) error {
	if err = interpretError(err); errors.Is(err, ErrNotFound) {
		return &ConditionFailedError{Statement: statement}
	}
	return err
}

// interpretError is the one place that turns driver errors into the store's
// errors, keeping the original in the chain for logs.
//
// Everything a PostgreSQL failover or restart produces is ErrUnavailable,
// so that callers answer "retry" and never "internal error": a refused or
// timed-out connect (every host of a multi-host URL tried), a connection
// reset or closed in the middle of a statement, the server's own goodbyes
// (admin, crash or fast shutdown, "the database system is starting up /
// shutting down / in recovery"), a connection exception reported by the
// server, and a write refused because the node is a read-only standby now.
// A statement cut off mid-way may or may not have committed; the ledger's
// guarded statements make the retry safe either way.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "OL409":
			return errKeyTaken
		case pgErr.Code == "OL429":
			return ErrSharesDoNotFit
		case pgErr.Code == "OL503":
			// OperationInsert found its budget shares gone (a reservation
			// lost to a crash before its flush): nothing was stored.
			return &unavailable{msg: fmt.Sprintf("%v: %s (SQLSTATE %s)", ErrUnavailable, pgErr.Message, pgErr.Code)}
		case pgErr.Code == "23505":
			return fmt.Errorf("%w: %s", ErrAlreadyExists, pgErr.ConstraintName)
		case pgErr.Code == "40001", pgErr.Code == "40P01":
			return fmt.Errorf("%w: %s", ErrRetry, pgErr.Message)
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", pgErr.Code == "53300",
			pgErr.Code == "25006", strings.HasPrefix(pgErr.Code, "08"):
			// admin shutdown, crash shutdown, cannot connect now (starting
			// up, shutting down, in recovery), too many connections,
			// read-only transaction (a standby: the primary moved), and the
			// connection exceptions of class 08. Terminated under a
			// statement, it may have committed just before.
			return &unavailable{msg: fmt.Sprintf("%v: %s (SQLSTATE %s)", ErrUnavailable, pgErr.Message, pgErr.Code),
				mayHaveCommitted: pgErr.Code == "57P01" || pgErr.Code == "57P02" || strings.HasPrefix(pgErr.Code, "08")}
		}
		return err
	}
	// A failed connect, or a statement that provably never reached the
	// server, means the database is unavailable rather than that the
	// statement failed.
	// A closed pool means this process is shutting down: another replica
	// can serve the call, so it is unavailable here, not failed.
	var connErr *pgconn.ConnectError
	notSent := errors.As(err, &connErr) || pgconn.SafeToRetry(err) || errors.Is(err, puddle.ErrClosedPool)
	if notSent || connectionLost(err) {
		return &unavailable{msg: fmt.Sprintf("%v: %v", ErrUnavailable, err), mayHaveCommitted: !notSent}
	}
	return err
}

// unavailable is ErrUnavailable with what the failure leaves open: whether
// the statement may have committed although its answer was lost.
type unavailable struct {
	msg              string
	mayHaveCommitted bool
}

func (e *unavailable) Error() string        { return e.msg }
func (e *unavailable) Is(target error) bool { return target == ErrUnavailable }

// MayHaveCommitted reports an error (as the store returns it) after which the statement that failed
// may nevertheless have committed: the connection broke (or the caller's
// bound ran out) once the statement had been sent, so its answer was lost,
// not necessarily its effect. A failed connect, a statement provably never
// sent, a closed pool and any answer from PostgreSQL that aborted the
// statement are not.
func MayHaveCommitted(err error) bool {
	var u *unavailable
	if errors.As(err, &u) {
		return u.mayHaveCommitted
	}
	// The statement's own bound ran out: sent, unless pgx says it never was.
	return (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !pgconn.SafeToRetry(err)
}

// connectionLost reports a connection that broke under a statement: reset,
// closed, or silent past a network timeout. The caller's own deadline or
// cancellation is not one: it stays a context error, which the edge answers
// as DEADLINE_EXCEEDED or CANCELLED.
func connectionLost(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Config sizes the connection pool.
type Config struct {
	// URL is a PostgreSQL connection string (DATABASE_URL).
	URL string
	// MaxConns caps the pool; 0 leaves pgxpool's default (max(4, CPUs)).
	MaxConns int32
	// NoReceipts writes events without their hash chain (hash, facts and
	// the operation's chain_head stay NULL): the bench's baseline for what
	// the receipts cost, never a production setting (docs/audit.md).
	NoReceipts bool
}

// Store is a pool of connections to the ledger database. Its Conn methods run
// each statement on the pool; InTx runs a callback inside one transaction.
type Store struct {
	Conn
	pool *pgxpool.Pool
	url  string
	// auditScan tunes the checkpoint's scan (AuditCheckpoint), and
	// auditScans counts the scans this Store made under the checkpoint lock.
	auditScan  auditScan
	auditScans atomic.Int64
	// wrapTx, when set (tests), wraps each transaction's statements: a
	// test's way to act between two of them.
	wrapTx func(db.DBTX) db.DBTX
}

// Conn runs queries on either the pool or one transaction; the same methods
// serve both.
type Conn struct {
	dbtx db.DBTX
	q    *db.Queries
	// noReceipts is Config.NoReceipts.
	noReceipts bool
}

// Open connects a pool and checks that the database answers.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("store: parse database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	pcfg.ConnConfig.Tracer = newQueryTracer()
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("store: open pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: ping: %w", interpretError(err))
	}
	return &Store{Conn: Conn{dbtx: pool, q: db.New(), noReceipts: cfg.NoReceipts}, pool: pool, url: cfg.URL,
		auditScan: defaultAuditScan()}, nil
}

// Close releases the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return interpretError(s.pool.Ping(ctx)) }

// maxTxAttempts bounds the retries of serialization failures.
const maxTxAttempts = 5

// InTx runs fn inside one transaction and commits it if fn returns nil. A
// serialization failure or deadlock anywhere in it reruns the whole callback
// (so fn must not have effects outside the database); nothing else is
// retried. fn must never make a network call to a downstream.
func (s *Store) InTx(ctx context.Context, fn func(c *Conn) error) error {
	return s.inTx(ctx, pgx.TxOptions{}, fn)
}

// inTx is InTx with the transaction's options (the server's defaults when
// zero).
func (s *Store) inTx(ctx context.Context, opts pgx.TxOptions, fn func(c *Conn) error) error {
	var err error
	for attempt := 0; attempt < maxTxAttempts; attempt++ {
		err = s.inTxOnce(ctx, opts, fn)
		if !errors.Is(err, ErrRetry) {
			return err
		}
		backoff := time.Duration(1+rand.IntN(10*(attempt+1))) * time.Millisecond
		select {
		case <-ctx.Done():
			return interpretError(ctx.Err())
		case <-time.After(backoff):
		}
	}
	return err
}

func (s *Store) inTxOnce(ctx context.Context, opts pgx.TxOptions, fn func(c *Conn) error) error {
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		return interpretError(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var dbtx db.DBTX = tx
	if s.wrapTx != nil {
		dbtx = s.wrapTx(tx)
	}
	if err := fn(&Conn{dbtx: dbtx, q: db.New(), noReceipts: s.noReceipts}); err != nil {
		return err
	}
	return interpretError(tx.Commit(ctx))
}
