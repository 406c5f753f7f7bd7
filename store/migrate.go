package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLockID is the advisory lock key that serialises migrators: any
// number of replicas may start at once and exactly one applies each file.
const migrationLockID int64 = 0x6f706c6564676572 // "opledger"

// Migration is one numbered, forward-only schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// BreaksOlder: a binary that does not know this migration must not run
	// against a database where it was applied (the file has the line
	// BreaksOlderMarker). Most migrations add what older code ignores; one
	// that changes what older code relies on (as 0010's dropped foreign key
	// did for the pruner's cascade) says so.
	BreaksOlder bool
}

// BreaksOlderMarker, as a line of a migration, marks it BreaksOlder.
const BreaksOlderMarker = "-- opledger: breaks older binaries"

// ErrSchemaTooNew: the database has a migration this binary does not know
// and must not run with (Migration.BreaksOlder).
var ErrSchemaTooNew = errors.New("store: the database's schema is newer than this binary")

// ErrSchemaTooOld: the database lacks migrations this binary needs.
var ErrSchemaTooOld = errors.New("store: the database's schema is older than this binary")

// Migrations returns the embedded migrations in order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("store: migration %q is not named NNNN_name.sql", name)
		}
		body, err := migrations.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		breaks := slices.Contains(strings.Split(string(body), "\n"), BreaksOlderMarker)
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body), BreaksOlder: breaks})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("store: two migrations numbered %d", out[i].Version)
		}
	}
	return out, nil
}

// Migrate applies every migration not yet applied, each in its own
// transaction, under a session advisory lock so concurrent migrators (several
// replicas starting together) never race. It returns the versions it applied.
func Migrate(ctx context.Context, url string) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: connect: %w", interpretError(err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockID); err != nil {
		return nil, fmt.Errorf("store: migrate: lock: %w", interpretError(err))
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockID) }()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migration (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("store: migrate: %w", interpretError(err))
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE schema_migration ADD COLUMN IF NOT EXISTS breaks_older boolean NOT NULL DEFAULT false`); err != nil {
		return nil, fmt.Errorf("store: migrate: %w", interpretError(err))
	}
	if err := newerSchema(ctx, conn, ms); err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range ms {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, `INSERT INTO schema_migration (version, name, breaks_older) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, m.Version, m.Name, m.BreaksOlder)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			applied = append(applied, m.Version)
			return nil
		})
		if err != nil {
			return applied, fmt.Errorf("store: migrate: %w", interpretError(err))
		}
	}
	return applied, nil
}

// newerSchema refuses a database where a migration this binary does not
// know, and must not run with, was applied (a binary rolled back past it).
// Newer migrations that older binaries may ignore are allowed, so that a
// rollback that does not cross a breaking one works.
func newerSchema(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, ms []Migration) error {
	last := 0
	if len(ms) > 0 {
		last = ms[len(ms)-1].Version
	}
	var v int
	var name string
	err := q.QueryRow(ctx, `SELECT version, name FROM schema_migration WHERE version > $1 AND breaks_older ORDER BY version LIMIT 1`, last).Scan(&v, &name)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("store: schema check: %w", interpretError(err))
	}
	return fmt.Errorf("%w: it has migration %s, which binaries that do not know it must not run with, and this binary knows migrations up to %d: run a newer opledger", ErrSchemaTooNew, name, last)
}

// CheckSchema, for a process that does not migrate (serve --migrate=false),
// refuses a database that lacks a migration this binary needs, or has one
// it must not run with.
func (s *Store) CheckSchema(ctx context.Context) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	var missing []string
	rows, err := s.pool.Query(ctx, `SELECT version FROM schema_migration`)
	if err != nil {
		return fmt.Errorf("%w: %v (was it ever migrated? run opledger migrate)", ErrSchemaTooOld, interpretError(err))
	}
	have := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("store: schema check: %w", interpretError(err))
		}
		have[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: schema check: %w", interpretError(err))
	}
	for _, m := range ms {
		if !have[m.Version] {
			missing = append(missing, m.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: it lacks %s: run opledger migrate", ErrSchemaTooOld, strings.Join(missing, ", "))
	}
	var hasColumn bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_name = 'schema_migration' AND column_name = 'breaks_older' AND table_schema = current_schema())`).Scan(&hasColumn); err != nil {
		return fmt.Errorf("store: schema check: %w", interpretError(err))
	}
	if !hasColumn {
		return nil // migrated by a binary that marked nothing
	}
	return newerSchema(ctx, s.pool, ms)
}
