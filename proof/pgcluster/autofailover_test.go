package pgcluster_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgcluster"
)

// requireAutoCtl skips the test where pg_auto_failover is not installed,
// except in CI, which installs it (.ci/run) and must not skip silently.
func requireAutoCtl(t *testing.T) {
	t.Helper()
	if _, _, err := pgcluster.FindAutoCtl(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// waitPrimary polls the monitor until node want is the primary.
func waitPrimary(t *testing.T, a *pgcluster.AutoFailover, want int, within time.Duration) time.Duration {
	t.Helper()
	begin := time.Now()
	for {
		p, err := a.Primary(t.Context())
		if err == nil && p == want {
			return time.Since(begin)
		}
		if time.Since(begin) > within {
			s, _ := a.State(t.Context())
			t.Fatalf("node %d did not become primary within %s; state %+v (primary %d, err %v)", want, within, s, p, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAutoFailoverKillAndRejoin runs a real pg_auto_failover formation:
// the primary killed outright (SIGKILL of its keeper and PostgreSQL) is
// replaced by the standby, which has every committed row (synchronous
// replication); restarted, the old primary rejoins as a standby, so that a
// second failover can follow.
func TestAutoFailoverKillAndRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a pg_auto_failover formation")
	}
	requireAutoCtl(t)
	t.Parallel()
	a, err := pgcluster.StartAutoFailover(t.Context(), pgcluster.AutoFailoverOptions{Dir: shortTempDir(t), Database: "app"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Stop(t.Context()) })
	url := a.URL("app")
	exec(t, url, "CREATE TABLE t (n int)", "INSERT INTO t VALUES (1)")
	waitPrimary(t, a, 0, time.Second)

	a.KillNode(0)
	took := waitPrimary(t, a, 1, 60*time.Second)
	t.Logf("failover after SIGKILL of the primary node: %s", took.Round(100*time.Millisecond))
	require.Equal(t, 1, queryInt(t, url, "SELECT count(*) FROM t"), "the committed row survived the failover")
	exec(t, url, "INSERT INTO t VALUES (2)")

	require.NoError(t, a.StartNode(0))
	require.NoError(t, a.WaitStable(t.Context(), 60*time.Second))
	p, err := a.Primary(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, p, "the old primary rejoined as the standby")

	a.KillNode(1)
	took = waitPrimary(t, a, 0, 60*time.Second)
	t.Logf("second failover: %s", took.Round(100*time.Millisecond))
	require.Equal(t, 2, queryInt(t, url, "SELECT count(*) FROM t"))
	require.NoError(t, a.StartNode(1))
	require.NoError(t, a.WaitStable(t.Context(), 60*time.Second))
}
