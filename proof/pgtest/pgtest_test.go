package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, pgtest.Options{Migrate: migrate})
}

// migrate is a stand-in for the real migrations. It leaves its connection open on purpose: a
// Migrate that forgets to close a pool must not break the clones of the template.
func migrate(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `
		CREATE TABLE widgets (id int PRIMARY KEY, name text NOT NULL);
		INSERT INTO widgets VALUES (1, 'seed');`)
	return err
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func TestNewDatabaseIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	urls := map[string]bool{}
	for i := range 4 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t)
			mu.Lock()
			require.False(t, urls[url], "every test gets its own database")
			urls[url] = true
			mu.Unlock()

			conn := connect(t, url)
			var n int
			require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM widgets WHERE name = 'seed'").Scan(&n))
			require.Equal(t, 1, n, "the migration is applied")

			// Each writes the same key: in a shared database all but one would fail.
			_, err := conn.Exec(t.Context(), "INSERT INTO widgets VALUES (2, $1)", fmt.Sprint(i))
			require.NoError(t, err)
			require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM widgets").Scan(&n))
			require.Equal(t, 2, n)
		})
	}
}

func TestNewDatabaseIsDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("user", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		var err error
		name, err = dbName(url)
		require.NoError(t, err)
		// An open connection must not keep the database alive.
		connect(t, url)
	})
	require.NotEmpty(t, name)
	require.True(t, strings.HasPrefix(name, fmt.Sprintf("opledger_test_%d_", os.Getpid())), name)

	conn := connect(t, pgtest.NewDatabase(t))
	var exists bool
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	require.False(t, exists)
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := pgtest.Cluster(t) // skips in DATABASE_URL mode
	require.NotNil(t, c)
	require.Same(t, c, pgtest.Cluster(t), "one cluster per test binary")
	url := pgtest.NewDatabase(t)
	require.Contains(t, url, fmt.Sprintf(":%d/", c.Port()))
}

func dbName(url string) (string, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "", err
	}
	return cfg.Database, nil
}

func TestNewCluster(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t)
	require.NoError(t, c.Crash(t.Context()))
	require.NoError(t, c.Restart(t.Context()))
	conn := connect(t, c.URL("postgres"))
	require.NoError(t, conn.Ping(t.Context()))
}

// TestSteppedClockIsInstant: a step of a stepped clock is in force in every
// backend as soon as SetClockOffset returns, also in backends that read the
// clock just before.
func TestSteppedClockIsInstant(t *testing.T) {
	t.Parallel()
	url, c := pgtest.NewSteppedClockDatabase(t)
	conns := []*pgx.Conn{connect(t, url), connect(t, url), connect(t, url)}
	dbNow := func(conn *pgx.Conn) time.Time {
		var now time.Time
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT now()").Scan(&now))
		return now
	}
	for _, conn := range conns {
		require.WithinDuration(t, time.Now(), dbNow(conn), time.Minute)
	}
	for _, step := range []time.Duration{time.Hour, 3 * time.Hour} {
		require.NoError(t, c.SetClockOffset(step))
		for _, conn := range conns {
			require.WithinDuration(t, time.Now().Add(step), dbNow(conn), time.Minute, "offset %s", step)
		}
	}
}
