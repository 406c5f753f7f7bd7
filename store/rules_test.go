package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/store"
)

// TestOperationRules: the row rules of operation (since migration 0010 a
// BEFORE trigger instead of CHECK constraints, which PostgreSQL 15 compiled
// anew for every statement) still refuse every row they refused, with the
// same SQLSTATE and constraint name, on insert and on update, and still let
// a NULL pass as a CHECK does.
func TestOperationRules(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	violates := func(t *testing.T, err error, constraint string) {
		t.Helper()
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "want a refusal by %s, got %v", constraint, err)
		require.Equal(t, "23514", pgErr.Code)
		require.Equal(t, constraint, pgErr.ConstraintName)
	}
	for _, c := range []struct {
		name, set, constraint string
	}{
		{"unknown state", "state = 'DONE'", "operation_state_check"},
		{"unknown decision", "approval_decision = 'MAYBE'", "operation_approval_decision_check"},
		{"empty key", "idempotency_key = ''", "operation_idempotency_key_check"},
		{"key too long", "idempotency_key = repeat('k', 256)", "operation_idempotency_key_check"},
		{"executing without lease owner", "state = 'EXECUTING', lease_owner = NULL, lease_expires_at = now()", "operation_executing_has_lease"},
		{"executing without lease end", "state = 'EXECUTING', lease_owner = 'x', lease_expires_at = NULL", "operation_executing_has_lease"},
		{"first send after the fence", "fence = 1, first_sent_fence = 2", "operation_check"},
		{"first send zero", "fence = 1, first_sent_fence = 0", "operation_check"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := g.row(t, shape{state: "READY", fence: 1})
			violates(t, g.st.Exec(ctx, "UPDATE operation SET "+c.set+" WHERE id = $1", id), c.constraint)
			require.Equal(t, "READY", g.get(t, id).State, "a refused update changes nothing")
		})
	}
	// The same rules on insert.
	_, _, err := g.st.OperationInsert(ctx, store.NewOperation{ID: "op_rules_bad_state", Tenant: "acme", Tool: "pay", ToolVersion: "1",
		IdempotencyKey: "rules-bad", Args: []byte(`{}`), Fingerprint: "v1:x", State: "DONE", PreparedBy: "pr_a",
		DownstreamKey: "opk_rules_bad", Actor: "test"})
	violates(t, err, "operation_state_check")
	_, err = g.st.OperationGet(ctx, "acme", "op_rules_bad_state")
	require.ErrorIs(t, err, store.ErrNotFound)

	// What the rules allow: NULLs pass, as in a CHECK constraint; a held
	// lease makes EXECUTING legal; a first send within the fences.
	id := g.row(t, shape{state: "READY", fence: 2})
	require.NoError(t, g.st.Exec(ctx, "UPDATE operation SET approval_decision = NULL, first_sent_fence = NULL WHERE id = $1", id))
	require.NoError(t, g.st.Exec(ctx, "UPDATE operation SET state = 'EXECUTING', lease_owner = 'x', lease_expires_at = now() + interval '1 minute', first_sent_fence = 2 WHERE id = $1", id))
	require.NoError(t, g.st.Exec(ctx, "UPDATE operation SET approval_decision = 'APPROVE', idempotency_key = repeat('k', 255) WHERE id = $1", id))
	require.Equal(t, "EXECUTING", g.get(t, id).State)
}

// TestPruneDeletesEvents: pruning an operation deletes its event log in the
// same statement (operation_event has no foreign key to cascade since
// migration 0010), and leaves other operations' events alone.
func TestPruneDeletesEvents(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	old := g.row(t, shape{state: "SUCCEEDED", fence: 1, firstSent: 1})
	kept := g.row(t, shape{state: "SUCCEEDED", fence: 1, firstSent: 1})
	for _, id := range []string{old, kept} {
		evs, err := g.st.OperationEvents(ctx, id)
		require.NoError(t, err)
		require.NotEmpty(t, evs)
	}
	require.NoError(t, g.st.Exec(ctx, "UPDATE operation SET updated_at = now() - interval '2 hours' WHERE id = $1", old))
	n, err := g.st.OperationPrune(ctx, time.Hour, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = g.st.OperationGet(ctx, "acme", old)
	require.ErrorIs(t, err, store.ErrNotFound)
	evs, err := g.st.OperationEvents(ctx, old)
	require.NoError(t, err)
	require.Empty(t, evs, "the pruned operation's events go with it")
	evs, err = g.st.OperationEvents(ctx, kept)
	require.NoError(t, err)
	require.NotEmpty(t, evs)
}

// TestEventFromStateIsTheStateReplaced: a transition's event records the
// state its update replaced (prev_state, from the locked row), also when a
// concurrent transition changed it between the statement's snapshot and its
// update: here the holder's SUCCEEDED waits on a row another transaction is
// moving from EXECUTING to OUTCOME_UNKNOWN, and its event must say it came
// from OUTCOME_UNKNOWN.
func TestEventFromStateIsTheStateReplaced(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	id := g.row(t, executing())
	tx, err := g.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE operation SET state = 'OUTCOME_UNKNOWN', lease_owner = NULL, lease_expires_at = NULL,
		first_sent_fence = fence WHERE id = $1`, id)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := g.st.OperationTransition(ctx, store.TransitionParams{Tenant: "acme", ID: id, From: []string{"EXECUTING", "OUTCOME_UNKNOWN"},
			Fence: 2, To: "SUCCEEDED", Event: "SUCCEEDED", Actor: "test"})
		done <- err
	}()
	// The transition waits for the row lock (its snapshot still says
	// EXECUTING) until the other transaction commits.
	require.Eventually(t, func() bool {
		var waiting bool
		err := g.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)

	evs, err := g.st.OperationEvents(ctx, id)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, "SUCCEEDED", last.ToState)
	require.Equal(t, "OUTCOME_UNKNOWN", last.FromState)
}

// TestInsertTwinsNeverFail: concurrent inserts of one operation (the same
// key, so the same downstream key) make exactly one row and refuse no one.
// Twins that both pass ON CONFLICT's first look meet again on the
// downstream key's unique index; that index must be an arbiter too, or the
// loser fails with a unique violation instead of reading the winner.
func TestInsertTwinsNeverFail(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	for round := range 40 {
		key := fmt.Sprintf("twin-%d", round)
		const n = 16
		errs := make(chan error, n)
		inserted := make(chan bool, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				_, ok, err := g.st.OperationInsert(ctx, store.NewOperation{ID: fmt.Sprintf("op_twin_%d_%d", round, i), Tenant: "acme",
					Tool: "pay", ToolVersion: "1", IdempotencyKey: key, Args: []byte(`{}`), Fingerprint: "v1:x", State: "READY",
					PreparedBy: "pr_a", DownstreamKey: "opk_" + key, Actor: "test"})
				errs <- err
				inserted <- ok
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		close(inserted)
		for err := range errs {
			require.NoError(t, err, "round %d", round)
		}
		made := 0
		for ok := range inserted {
			if ok {
				made++
			}
		}
		require.Equal(t, 1, made, "round %d", round)
	}
}

// TestGuardedStatementsFindTheRowByItsKey: the statements that change one
// operation find it through the primary key, in the generic plan a pooled
// connection caches, on a table without statistics yet (a new database, or
// before autovacuum's first ANALYZE). operation_list (tenant, state,
// created_at, id) matches their tenant and state too, and a plan through it
// walks every entry of the tenant in that state, dead versions included.
func TestGuardedStatementsFindTheRowByItsKey(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	id := g.row(t, shape{state: "READY", fence: 1})
	lease := store.Lease{Owner: "srv", Duration: time.Minute, Actor: "test"}
	for name, fn := range map[string]func(c *store.Conn) error{
		"OperationClaim": func(c *store.Conn) error {
			_, _, err := c.OperationClaim(ctx, "acme", id, store.Claim{From: "READY", To: "EXECUTING", Event: "CLAIMED"}, lease)
			return err
		},
		"OperationClaimKnown": func(c *store.Conn) error {
			base := store.Operation{ID: id, Tenant: "acme", State: "READY", Events: 1}
			_, _, err := c.OperationClaim(ctx, "acme", id, store.Claim{From: "READY", To: "EXECUTING", Event: "CLAIMED", Base: base}, lease)
			return err
		},
		"OperationTransition": func(c *store.Conn) error {
			_, err := c.OperationTransition(ctx, store.TransitionParams{Tenant: "acme", ID: id, From: []string{"EXECUTING"}, Fence: 1,
				To: "SUCCEEDED", Event: "SUCCEEDED", Actor: "test"})
			return err
		},
		"OperationDecide": func(c *store.Conn) error {
			_, err := c.OperationDecide(ctx, store.Decision{Tenant: "acme", ID: id, From: []string{"AWAITING_APPROVAL"}, To: "READY",
				Decision: "APPROVE", Event: "APPROVED", Actor: "test"})
			return err
		},
		"OperationTakeOver": func(c *store.Conn) error {
			_, err := c.OperationTakeOver(ctx, store.TakeOver{Tenant: "acme", ID: id, From: "EXECUTING", Event: "LEASE_TAKEN_OVER", Fence: 1}, lease)
			return err
		},
		"OperationGet": func(c *store.Conn) error {
			_, err := c.OperationGet(ctx, "acme", id)
			return err
		},
		"OperationMarkWaited": func(c *store.Conn) error {
			_, err := c.OperationMarkWaited(ctx, "acme", id, 1)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			plan, err := g.st.ExplainGeneric(ctx, fn)
			require.NoError(t, err)
			require.NotContains(t, plan, "operation_list", plan)
			require.NotContains(t, plan, "operation_open", plan)
			require.Contains(t, plan, "Index Scan using operation_pkey on operation", plan)
		})
	}
}

// TestWebhookEventPruneForgetsOldEvents: webhook events received longer ago
// than the cutoff are forgotten (a later delivery of one is new again),
// recent ones still deduplicate, and a batch deletes at most its size.
func TestWebhookEventPruneForgetsOldEvents(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	for _, id := range []string{"evt_old_1", "evt_old_2", "evt_new"} {
		fresh, err := g.st.WebhookEventInsert(ctx, "pay", id, "")
		require.NoError(t, err)
		require.True(t, fresh)
	}
	require.NoError(t, g.st.Exec(ctx, "UPDATE webhook_event SET received_at = now() - interval '2 hours' WHERE id LIKE 'evt_old_%'"))
	n, err := g.st.WebhookEventPrune(ctx, time.Hour, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "one batch of one")
	n, err = g.st.WebhookEventPrune(ctx, time.Hour, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	for id, want := range map[string]bool{"evt_old_1": true, "evt_old_2": true, "evt_new": false} {
		fresh, err := g.st.WebhookEventInsert(ctx, "pay", id, "")
		require.NoError(t, err)
		require.Equal(t, want, fresh, id)
	}
}
