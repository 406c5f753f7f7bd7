package store

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

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
