package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/store"
)

// TestReservationLostToACrashStoresNothing: a Prepare's budget reservation
// commits without waiting for the flush (docs/policy.md, "How a reservation
// is made"); if the database crashes before the WAL writer flushed it, the
// reservation is gone after the restart, and the Prepare's insert, on a new
// connection, must not store an operation that counts against no budget
// (OL503, read as unavailable). Once reserved again, it is stored.
func TestReservationLostToACrashStoresNothing(t *testing.T) {
	t.Parallel()
	url, cl := pgtest.NewPrivateDatabase(t)
	ctx := t.Context()
	_, err := store.Migrate(ctx, url)
	require.NoError(t, err)
	admin, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer admin.Close()
	// The WAL writer flushes asynchronous commits every wal_writer_delay:
	// 10 s leaves the reservation unflushed when the crash comes.
	_, err = admin.Exec(ctx, `ALTER SYSTEM SET wal_writer_delay = '10s'`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var d string
		require.NoError(t, admin.QueryRow(ctx, `SHOW wal_writer_delay`).Scan(&d))
		return d == "10s"
	}, 10*time.Second, 20*time.Millisecond)
	st, err := store.Open(ctx, store.Config{URL: url, MaxConns: 4})
	require.NoError(t, err)
	defer st.Close()

	rs := []store.Reservation{{Tenant: "acme", Name: "one", OperationID: "op_1", MaxCount: 1, Window: time.Hour, MaxUses: 100}}
	res, err := st.BudgetReserve(ctx, rs, true, false)
	require.NoError(t, err)
	require.Equal(t, store.Reserved{Refused: -1, Over: -1}, res)
	require.NoError(t, cl.Crash(ctx))
	require.NoError(t, cl.Restart(ctx))

	n := store.NewOperation{ID: "op_1", Tenant: "acme", Tool: "pay", ToolVersion: "1", IdempotencyKey: "k1", Args: []byte(`{}`),
		Fingerprint: "v1:x", State: "READY", PreparedBy: "pr_a", ApprovalTTL: time.Minute, DownstreamKey: "opk_1", Actor: "test",
		BudgetNames: []string{"one"}, BudgetScopes: []string{""}}
	// The pool's connections died with the server: the first tries fail to
	// connect; then the statement itself answers.
	var insertErr error
	require.Eventually(t, func() bool {
		_, inserted, err := st.OperationInsert(ctx, n)
		require.False(t, inserted, "an operation whose reservation is gone")
		insertErr = err
		return err != nil && strings.Contains(err.Error(), "OL503")
	}, 30*time.Second, 50*time.Millisecond)
	require.True(t, errors.Is(insertErr, store.ErrUnavailable), "%v", insertErr)
	require.False(t, store.MayHaveCommitted(insertErr))
	_, err = st.OperationGet(ctx, "acme", "op_1")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing stored")

	res, err = st.BudgetReserve(ctx, rs, true, false)
	require.NoError(t, err)
	require.Equal(t, -1, res.Refused, "the lost reservation counts nowhere")
	_, inserted, err := st.OperationInsert(ctx, n)
	require.NoError(t, err)
	require.True(t, inserted)
	rs[0].OperationID = "op_2"
	res, err = st.BudgetReserve(ctx, rs, true, false)
	require.NoError(t, err)
	require.Equal(t, 0, res.Refused, "op_1 holds the only share")
}

// TestReservationMeetsAPrunedBudget: a reservation that finds no budget row
// and then meets one that budget_prune deletes under it (the row created
// empty by a refused reservation, locked and deleted by the pruner while
// the reservation waits) still locks a budget row before it judges its
// share: it is admitted on a budget that counts it, and the next share
// past the limit is refused. (A reservation that judged NULLs admitted its
// share into no budget, and the limit was lost for good.)
func TestReservationMeetsAPrunedBudget(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	// A test-only hold in the reservation's INSERT of the budget row, while
	// the session setting test.hold is on: it waits for advisory lock 42.
	_, err := g.pool.Exec(ctx, `
		CREATE FUNCTION test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF current_setting('test.hold', true) = 'on' THEN PERFORM pg_advisory_xact_lock(42); END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_hold BEFORE INSERT ON budget FOR EACH ROW EXECUTE FUNCTION test_hold();`)
	require.NoError(t, err)
	holder, err := g.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT pg_advisory_xact_lock(42)`)
	require.NoError(t, err)

	b, err := g.pool.Acquire(ctx)
	require.NoError(t, err)
	defer b.Release()
	var bPID int
	require.NoError(t, b.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&bPID))
	_, err = b.Exec(ctx, `SET test.hold = 'on'`)
	require.NoError(t, err)
	waiting := func(kind string) func() bool {
		return func() bool {
			var n int
			require.NoError(t, g.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE pid = $1 AND wait_event_type = 'Lock' AND wait_event = $2`, bPID, kind).Scan(&n))
			return n == 1
		}
	}
	type result struct {
		out []int32
		err error
	}
	done := make(chan result, 1)
	go func() {
		var out []int32
		err := b.QueryRow(ctx, `SELECT budget_reserve('acme', 'op_b', '{one}', '{""}', '{1}', '{1}', '{f}', '{0}', '{3600}', '{f}', 100, false, false)`).Scan(&out)
		done <- result{out, err}
	}()
	require.Eventually(t, waiting("advisory"), 10*time.Second, 10*time.Millisecond, "B found no budget and is inserting one")

	// A reservation refused since created the budget empty; the pruner
	// locks it.
	_, err = g.pool.Exec(ctx, `INSERT INTO budget (tenant, name, scope, used_count, used_sum, window_seconds) VALUES ('acme', 'one', '', 0, 0, 3600)`)
	require.NoError(t, err)
	pruner, err := g.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = pruner.Rollback(ctx) }()
	var locked int
	require.NoError(t, pruner.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM budget WHERE used_count = 0 FOR UPDATE SKIP LOCKED) x`).Scan(&locked))
	require.Equal(t, 1, locked)
	require.NoError(t, holder.Rollback(ctx))
	require.Eventually(t, waiting("transactionid"), 10*time.Second, 10*time.Millisecond, "B waits for the pruner's lock")
	_, err = pruner.Exec(ctx, `DELETE FROM budget WHERE tenant = 'acme' AND name = 'one' AND used_count = 0`)
	require.NoError(t, err)
	require.NoError(t, pruner.Commit(ctx))

	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, []int32{-1, -1}, r.out, "B admitted")
	g.requireBudgetsExact(t)
	res, err := g.st.BudgetReserve(ctx, []store.Reservation{{Tenant: "acme", Name: "one", OperationID: "op_c", Amount: 1,
		MaxCount: 1, Window: time.Hour, MaxUses: 100}}, false, false)
	require.NoError(t, err)
	require.Equal(t, 0, res.Refused, "op_b holds the only share")
}
