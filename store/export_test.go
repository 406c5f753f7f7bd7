package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/opledger/opledger/store/internal/db"
)

// recorder remembers the last query sent through it.
type recorder struct {
	db.DBTX
	sql  string
	args []any
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return r.DBTX.Query(ctx, sql, args...)
}

// ExplainOperationList runs OperationList(q) and returns the plan
// PostgreSQL executed it with (EXPLAIN ANALYZE of the very statement and
// arguments the method sent), one line per plan node.
func (s *Store) ExplainOperationList(ctx context.Context, q ListQuery) (string, error) {
	rec := &recorder{DBTX: s.pool}
	c := &Conn{dbtx: rec, q: db.New()}
	if _, err := c.OperationList(ctx, q); err != nil {
		return "", err
	}
	rows, err := s.pool.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+rec.sql, rec.args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// Exec runs one statement, for tests that shape data directly.
func (s *Store) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := s.pool.Exec(ctx, sql, args...)
	return err
}

// errRecorded stops a recorded statement before it reaches the database.
var errRecorded = errors.New("store: statement recorded, not run")

// catcher records the statement sent through it and runs nothing.
type catcher struct {
	sql  string
	args []any
}

func (c *catcher) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.CommandTag{}, errRecorded
}

func (c *catcher) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errRecorded
}

func (c *catcher) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	c.sql, c.args = sql, args
	return errRow{}
}

type errRow struct{}

func (errRow) Scan(...any) error { return errRecorded }

// ExplainGeneric records the statement fn sends through a Conn and returns
// the generic plan PostgreSQL would cache for it as a prepared statement
// (what a pooled connection may run after five executions, when PostgreSQL
// judges it no costlier than the custom plans), one line per plan
// node. Nothing is executed. Each of settings ("enable_seqscan = off") is
// SET for the EXPLAIN and RESET after it.
func (s *Store) ExplainGeneric(ctx context.Context, fn func(c *Conn) error, settings ...string) (string, error) {
	rec := &catcher{}
	// Receipts off: the doc hashes (binary) are NULL, which literal need not
	// write; a generic plan does not depend on the values.
	if err := fn(&Conn{dbtx: rec, q: db.New(), noReceipts: true}); !errors.Is(err, errRecorded) && rec.sql == "" {
		return "", fmt.Errorf("store: nothing recorded: %v", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	defer func() {
		// pgx's DeallocateAll also forgets its own cache of the statements
		// (a raw DEALLOCATE ALL left it naming statements gone, and the
		// next identical EXPLAIN on this connection failed).
		_ = conn.Conn().DeallocateAll(context.WithoutCancel(ctx))
		_, _ = conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode")
		for _, set := range settings {
			name, _, _ := strings.Cut(set, "=")
			_, _ = conn.Exec(context.WithoutCancel(ctx), "RESET "+strings.TrimSpace(name))
		}
	}()
	tx := conn
	for _, set := range append([]string{"plan_cache_mode = force_generic_plan"}, settings...) {
		if _, err := tx.Exec(ctx, "SET "+set); err != nil {
			return "", err
		}
	}
	if _, err := tx.Exec(ctx, "PREPARE explained AS "+rec.sql); err != nil {
		return "", err
	}
	// EXECUTE takes its arguments as literals, not as parameters.
	lits := make([]string, len(rec.args))
	for i, a := range rec.args {
		if lits[i], err = literal(a); err != nil {
			return "", err
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE explained("+strings.Join(lits, ", ")+")")
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// literal writes a statement argument as an SQL literal.
func literal(a any) (string, error) {
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch v := a.(type) {
	case string:
		return quote(v), nil
	case []byte:
		if v == nil {
			return "NULL", nil
		}
		return quote(string(v)), nil
	case pgtype.Text:
		if !v.Valid {
			return "NULL", nil
		}
		return quote(v.String), nil
	case pgtype.Timestamptz:
		switch {
		case !v.Valid:
			return "NULL", nil
		case v.InfinityModifier == pgtype.Infinity:
			return "'infinity'::timestamptz", nil
		case v.InfinityModifier == pgtype.NegativeInfinity:
			return "'-infinity'::timestamptz", nil
		}
		return quote(v.Time.UTC().Format(time.RFC3339Nano)) + "::timestamptz", nil
	case pgtype.Int4:
		if !v.Valid {
			return "NULL", nil
		}
		return fmt.Sprint(v.Int32), nil
	case pgtype.Int8:
		if !v.Valid {
			return "NULL", nil
		}
		return fmt.Sprint(v.Int64), nil
	case bool, int32, int64, float64:
		return fmt.Sprint(v), nil
	case []string:
		q := make([]string, len(v))
		for i, x := range v {
			q[i] = quote(x)
		}
		return "ARRAY[" + strings.Join(q, ", ") + "]::text[]", nil
	}
	return "", fmt.Errorf("store: no literal for %T", a)
}

// interposer runs before with each statement's number (from 1) before the
// statement is sent: a test's way to act between two statements of one
// store method, as a concurrent writer or a caller giving up would.
type interposer struct {
	db.DBTX
	n      int
	before func(n int)
}

func (i *interposer) next() {
	i.n++
	i.before(i.n)
}

func (i *interposer) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	i.next()
	return i.DBTX.Exec(ctx, sql, args...)
}

func (i *interposer) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	i.next()
	return i.DBTX.Query(ctx, sql, args...)
}

func (i *interposer) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	i.next()
	return i.DBTX.QueryRow(ctx, sql, args...)
}

// ConnBefore returns a Conn on the store's pool that calls before(n)
// before it sends its n-th statement.
func (s *Store) ConnBefore(before func(n int)) *Conn {
	return &Conn{dbtx: &interposer{DBTX: s.pool, before: before}, q: db.New()}
}

// SetTxBefore makes every transaction s runs call before(n) before it sends
// its n-th statement (from 1).
func SetTxBefore(s *Store, before func(n int)) {
	s.wrapTx = func(d db.DBTX) db.DBTX { return &interposer{DBTX: d, before: before} }
}

// SetAuditScan makes s's checkpoints commit to at most batch heads each,
// put their scan horizon slack before the open transactions' earliest
// start, and scan the whole table every fullEvery-th scan
// (AuditCheckpointBatch, AuditScanSlack and AuditFullScanEvery otherwise).
func SetAuditScan(s *Store, batch int32, slack time.Duration, fullEvery int64) {
	s.auditScan = auditScan{batch: batch, slack: slack, fullEvery: max(fullEvery, 1)}
}

// AuditHeadsChanged sends the checkpoint's scan through c (for
// ExplainGeneric).
func (c *Conn) AuditHeadsChanged(ctx context.Context, since time.Time, batch int32) error {
	_, err := c.q.AuditHeadsChanged(ctx, c.dbtx, db.AuditHeadsChangedParams{Since: pgtype.Timestamptz{Time: since, Valid: true}, BatchSize: batch})
	return err
}
