package store_test

import (
	"context"
	"crypto/sha256"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/store"
)

// allVersions lists the embedded migrations' versions in order.
func allVersions(t *testing.T) []int {
	t.Helper()
	ms, err := store.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	var vs []int
	for _, m := range ms {
		vs = append(vs, m.Version)
	}
	require.True(t, slices.IsSorted(vs))
	return vs
}

// migrateConcurrently runs n migrators at once on url and returns what each
// applied.
func migrateConcurrently(t *testing.T, url string, n int) [][]int {
	t.Helper()
	applied := make([][]int, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			applied[i], errs[i] = store.Migrate(context.Background(), url)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "migrator %d", i)
	}
	return applied
}

// requireUsable checks that the migrated schema works: a principal can be
// stored and found by its key hash.
func requireUsable(t *testing.T, url string) {
	t.Helper()
	st, err := store.Open(t.Context(), store.Config{URL: url, MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	h := sha256.Sum256([]byte("a test key"))
	_, err = st.PrincipalCreate(t.Context(), store.Principal{ID: "pr_test", Tenant: "acme", Name: "test", Roles: []string{"agent"}, KeyPrefix: "opk_test"}, h[:])
	require.NoError(t, err)
	p, err := st.PrincipalByKeyHash(t.Context(), h[:])
	require.NoError(t, err)
	require.Equal(t, "acme", p.Tenant)
}

// TestMigrateFromScratchConcurrently starts four migrators at once on an empty
// database, as replicas starting together would: each migration is applied
// exactly once, by one of them, and none fails.
func TestMigrateFromScratchConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	applied := migrateConcurrently(t, url, 4)
	var all []int
	for _, a := range applied {
		all = append(all, a...)
	}
	slices.Sort(all)
	require.Equal(t, allVersions(t), all, "every migration applied exactly once across the migrators")

	again, err := store.Migrate(t.Context(), url)
	require.NoError(t, err)
	require.Empty(t, again)
	requireUsable(t, url)
}

// TestMigrateIsIdempotent migrates once, then again, then four times at once:
// everything after the first run is a no-op.
func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	first, err := store.Migrate(t.Context(), url)
	require.NoError(t, err)
	require.Equal(t, allVersions(t), first)

	second, err := store.Migrate(t.Context(), url)
	require.NoError(t, err)
	require.Empty(t, second)

	for i, a := range migrateConcurrently(t, url, 4) {
		require.Empty(t, a, "migrator %d", i)
	}
	requireUsable(t, url)
}

// TestOpenOverUnixSocket: a URL that names the server's socket directory
// (host=/dir) migrates and opens as a TCP one does, and its connections do
// not go over TCP. docs/operations.md offers it to a replica on the
// database's host.
func TestOpenOverUnixSocket(t *testing.T) {
	t.Parallel()
	c := pgtest.Cluster(t)
	tcp, err := url.Parse(pgtest.NewDatabase(t))
	require.NoError(t, err)
	sock, ok := c.SocketURL(strings.TrimPrefix(tcp.Path, "/"))
	require.True(t, ok, "the test cluster listens on a socket")
	_, err = store.Migrate(t.Context(), sock)
	require.NoError(t, err)
	st, err := store.Open(t.Context(), store.Config{URL: sock, MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.OperationGet(t.Context(), "acme", "op_none")
	require.ErrorIs(t, err, store.ErrNotFound)

	conn, err := pgx.Connect(t.Context(), sock)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(t.Context()))
	var overSocket bool
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT inet_server_addr() IS NULL`).Scan(&overSocket))
	require.True(t, overSocket, "inet_server_addr() is NULL on a Unix socket only")
}

// TestSchemaNewerThanTheBinary: a binary rolled back past a migration it
// does not know starts only if that migration does not break older
// binaries (Migration.BreaksOlder); a process that does not migrate also
// refuses a database that lacks one of its migrations.
func TestSchemaNewerThanTheBinary(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	_, err := store.Migrate(ctx, url)
	require.NoError(t, err)
	st, err := store.Open(ctx, store.Config{URL: url, MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.CheckSchema(ctx))

	// A newer binary applied a migration older ones may ignore: fine.
	require.NoError(t, st.Exec(ctx, `INSERT INTO schema_migration (version, name) VALUES (9998, '9998_an_index')`))
	_, err = store.Migrate(ctx, url)
	require.NoError(t, err)
	require.NoError(t, st.CheckSchema(ctx))

	// One that breaks older binaries: refused, by a migrating process and by one that does not.
	require.NoError(t, st.Exec(ctx, `INSERT INTO schema_migration (version, name, breaks_older) VALUES (9999, '9999_a_new_rule', true)`))
	_, err = store.Migrate(ctx, url)
	require.ErrorIs(t, err, store.ErrSchemaTooNew)
	require.ErrorContains(t, err, "9999_a_new_rule")
	require.ErrorIs(t, st.CheckSchema(ctx), store.ErrSchemaTooNew)

	// A database that lacks a migration this binary needs.
	require.NoError(t, st.Exec(ctx, `DELETE FROM schema_migration WHERE version >= 9998`))
	ms, err := store.Migrations()
	require.NoError(t, err)
	last := ms[len(ms)-1]
	require.NoError(t, st.Exec(ctx, `DELETE FROM schema_migration WHERE version = $1`, last.Version))
	err = st.CheckSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchemaTooOld)
	require.ErrorContains(t, err, last.Name)
}

// TestMigrationsMarkWhatBreaksOlderBinaries: the marker line sets
// BreaksOlder, and 0022 carries it (an older binary's prune would leave an
// identity held for ever).
func TestMigrationsMarkWhatBreaksOlderBinaries(t *testing.T) {
	t.Parallel()
	ms, err := store.Migrations()
	require.NoError(t, err)
	var marked []string
	for _, m := range ms {
		require.Equal(t, slices.Contains(strings.Split(m.SQL, "\n"), store.BreaksOlderMarker), m.BreaksOlder, m.Name)
		if m.BreaksOlder {
			marked = append(marked, m.Name)
		}
	}
	require.Equal(t, []string{"0022_identity_effect_from_operation"}, marked)
}
