package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrObjectInUse: PostgreSQL refused because another session uses the
// object, e.g. a template database being copied while someone is connected.
var ErrObjectInUse = errors.New("store: object in use")

// AdminExec runs administrative statements (CREATE DATABASE, DROP DATABASE
// and the like), in order, on one connection to the server at url. It is
// for tooling that manages databases, so that only this package speaks to
// PostgreSQL.
func AdminExec(ctx context.Context, url string, sqls ...string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("store: connect: %w", interpretError(err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55006" {
				return fmt.Errorf("%s: %w: %v", sql, ErrObjectInUse, err)
			}
			return fmt.Errorf("%s: %w", sql, interpretError(err))
		}
	}
	return nil
}

// QuoteIdent quotes an SQL identifier such as a database name.
func QuoteIdent(name string) string { return pgx.Identifier{name}.Sanitize() }
