package pgcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgcluster"
)

// shortTempDir returns a fresh directory under /tmp (t.TempDir paths can be too long for a Unix
// socket) that the postgres user can reach; it is removed when the test ends.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "pgc-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func queryInt(t *testing.T, url, sql string) int {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
	return n
}

func exec(t *testing.T, url string, sql ...string) {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for _, s := range sql {
		_, err := conn.Exec(ctx, s)
		require.NoError(t, err, s)
	}
}

// TestLifecycle shares one initdb across the whole lifecycle, because initdb dominates the cost.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := shortTempDir(t)
	opts := pgcluster.Options{Dir: dir, Settings: map[string]string{"application_name": "it's pgcluster"}}
	c, err := pgcluster.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	require.NotZero(t, c.Port())
	require.Equal(t, "postgres://postgres@127.0.0.1:"+strconv.Itoa(c.Port())+"/my%20db?sslmode=disable", c.URL("my db"))
	require.FileExists(t, filepath.Join(dir, "data", "PG_VERSION"))
	require.FileExists(t, filepath.Join(dir, "postgres.log"))
	require.FileExists(t, filepath.Join(dir, "sock", ".s.PGSQL."+strconv.Itoa(c.Port())))

	t.Run("settings", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		require.NoError(t, err)
		defer conn.Close(context.Background())
		for name, want := range map[string]string{
			"fsync":              "off",
			"listen_addresses":   "127.0.0.1",
			"server_encoding":    "UTF8",
			"lc_collate":         "C",
			"application_name":   "it's pgcluster",
			"synchronous_commit": "on",
		} {
			var got string
			require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got))
			require.Equal(t, want, got, name)
		}
	})

	// A name that needs quoting proves identifiers are quoted.
	const db = `Ledger "db"`
	require.NoError(t, c.CreateDatabase(ctx, "tmpl", ""))
	exec(t, c.URL("tmpl"), "CREATE TABLE t (v int)")
	require.NoError(t, c.CreateDatabase(ctx, db, "tmpl"))
	exec(t, c.URL(db), "INSERT INTO t VALUES (1), (2)")

	t.Run("crash and restart keep committed data", func(t *testing.T) {
		pid, err := c.PID()
		require.NoError(t, err)
		require.Positive(t, pid)
		port := c.Port()

		require.NoError(t, c.Crash(ctx))
		_, err = pgx.Connect(ctx, c.URL(db))
		require.Error(t, err)
		_, err = c.PID()
		require.Error(t, err)

		require.NoError(t, c.Restart(ctx))
		require.Equal(t, port, c.Port())
		require.Equal(t, 3, queryInt(t, c.URL(db), "SELECT sum(v) FROM t"))
	})

	t.Run("restart after the postmaster was killed", func(t *testing.T) {
		pid, err := c.PID()
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		require.NoError(t, c.Restart(ctx))
		require.Equal(t, 3, queryInt(t, c.URL(db), "SELECT sum(v) FROM t"))
	})

	t.Run("stop and restart", func(t *testing.T) {
		require.NoError(t, c.Stop(ctx))
		require.NoError(t, c.Stop(ctx), "stopping a stopped cluster is a no-op")
		require.NoError(t, c.Restart(ctx))
		exec(t, c.URL(db), "INSERT INTO t VALUES (3)")
		require.NoError(t, c.Restart(ctx), "restarting a running cluster stops it first")
		require.Equal(t, 6, queryInt(t, c.URL(db), "SELECT sum(v) FROM t"))
	})

	t.Run("start again on a dir whose server was left running", func(t *testing.T) {
		// c is still running: a second Start on the same dir must take over, not fail on the lock.
		c2, err := pgcluster.Start(ctx, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c2.Stop(context.Background()) })
		require.Equal(t, 6, queryInt(t, c2.URL(db), "SELECT sum(v) FROM t"))
		require.NoError(t, c2.Stop(ctx))
	})

	t.Run("start with a stale postmaster.pid", func(t *testing.T) {
		// A pid that is certainly not a postmaster of this dir: our own.
		pidFile := filepath.Join(dir, "data", "postmaster.pid")
		require.NoError(t, os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"+filepath.Join(dir, "data")+"\n"), 0o600))
		c3, err := pgcluster.Start(ctx, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c3.Stop(context.Background()) })
		require.Equal(t, 6, queryInt(t, c3.URL(db), "SELECT sum(v) FROM t"))

		require.NoError(t, c3.DropDatabase(ctx, db))
		require.NoError(t, c3.DropDatabase(ctx, db), "dropping a missing database is a no-op")
		require.NoError(t, c3.Stop(ctx))
	})

	t.Run("failed start reports the server log", func(t *testing.T) {
		bad := opts
		bad.Settings = map[string]string{"max_connections": "lots"}
		_, err := pgcluster.Start(ctx, bad)
		require.Error(t, err)
		require.Contains(t, err.Error(), "max_connections")
		require.Contains(t, err.Error(), "postgres.log")
	})
}

func TestStartRejectsBadOptions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.ErrorContains(t, err, "Dir")
	_, err = pgcluster.Start(ctx, pgcluster.Options{Dir: shortTempDir(t), Settings: map[string]string{"port = 1\nx": "1"}})
	require.ErrorContains(t, err, "invalid setting name")
	_, err = pgcluster.Start(ctx, pgcluster.Options{Dir: shortTempDir(t), BinDir: "/nonexistent"})
	require.ErrorContains(t, err, "not found")
}

func TestStartCreatesReachableParents(t *testing.T) {
	t.Parallel()
	base := shortTempDir(t)
	require.NoError(t, os.Chmod(base, 0o755))
	dir := filepath.Join(base, "a", "b")
	c, err := pgcluster.Start(t.Context(), pgcluster.Options{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, c.Stop(t.Context()))
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	p, err := pgcluster.FreePort()
	require.NoError(t, err)
	require.Positive(t, p)
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	dir, err := pgcluster.FindBinDir()
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "pg_ctl"))
}
