package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/store"
)

// requireStored requires op, as a write returned it, to be the row as
// stored: a read of the operation gives the same (the database's clock of
// each aside).
func requireStored(t *testing.T, g *guardDB, op store.Operation) {
	t.Helper()
	got := g.get(t, op.ID)
	require.False(t, op.DBNow.IsZero(), "a write reports the database's clock")
	op.DBNow, got.DBNow = time.Time{}, time.Time{}
	require.Equal(t, got, op)
}

var (
	writtenLease = store.Lease{Owner: "srv_a", Duration: 2500 * time.Millisecond, Actor: "server:srv_a"}
	readyClaim   = store.Claim{From: "READY", To: "EXECUTING", Event: "CLAIMED", RequireApprovalInForce: true}
)

// writtenOp is a READY operation id, changed by mod if given. Its args are
// not in jsonb's canonical form: a row returns the stored args.
func writtenOp(id string, mod func(*store.NewOperation)) store.NewOperation {
	no := store.NewOperation{ID: id, Tenant: "acme", Tool: "pay", ToolVersion: "3", IdempotencyKey: "key-" + id,
		Args: []byte(`{"zeta":1.50, "amount": 1e3,"a":{"y":true,"x":null}}`), Fingerprint: "v1:f", State: "READY",
		PreparedBy: "pr_a", ApprovalTTL: 90500 * time.Millisecond, DownstreamKey: "opk_" + id, Actor: "agent", Detail: "prepared"}
	if mod != nil {
		mod(&no)
	}
	return no
}

// TestWrittenRowIsTheStoredRow: OperationInsert and OperationTransition
// return only the columns the caller cannot know and complete the row from
// what it gave them (docs/performance.md, finding 31). Whatever happened to
// the row between the caller's read and the write, the operation they
// return is the row as stored: the columns that change without an event
// (waited, reconcile_attempts, next_reconcile_at) come from the statement,
// and a base that is not the version the statement changed is read again.
func TestWrittenRowIsTheStoredRow(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	lease, claim := writtenLease, readyClaim
	n := 0
	newOp := func(mod func(*store.NewOperation)) store.NewOperation {
		n++
		return writtenOp("op_written"+string(rune('a'+n)), mod)
	}
	insert := func(no store.NewOperation) store.Operation {
		op, inserted, err := g.st.OperationInsert(ctx, no)
		require.NoError(t, err)
		require.True(t, inserted)
		requireStored(t, g, op)
		return op
	}
	outcome := func(base store.Operation, to string, mod func(*store.TransitionParams)) store.Operation {
		tr := store.TransitionParams{Tenant: "acme", ID: base.ID, From: []string{base.State}, Fence: base.Fence, To: to,
			Event: "TEST", Actor: "server:srv_a", Detail: "test", Base: base}
		if mod != nil {
			mod(&tr)
		}
		op, err := g.st.OperationTransition(ctx, tr)
		require.NoError(t, err)
		requireStored(t, g, op)
		return op
	}

	t.Run("insert", func(t *testing.T) {
		insert(newOp(nil))
		insert(newOp(func(no *store.NewOperation) {
			no.State, no.ApprovalRequired, no.Notify = "AWAITING_APPROVAL", true, true
		}))
	})

	t.Run("one call: claimed insert, then its outcome", func(t *testing.T) {
		op := insert(newOp(func(no *store.NewOperation) { no.Claim, no.Lease = &claim, lease }))
		require.Equal(t, "EXECUTING", op.State)
		outcome(op, "SUCCEEDED", func(tr *store.TransitionParams) {
			tr.ExternalRef, tr.Result, tr.SetError = "ch_1", []byte(`{"status":"succeeded", "id":"ch_1","n":2E2}`), true
		})
	})

	t.Run("claim, waited, outcome", func(t *testing.T) {
		op := insert(newOp(nil))
		claimed, ok, err := g.st.OperationClaim(ctx, "acme", op.ID, claim, lease)
		require.NoError(t, err)
		require.True(t, ok)
		requireStored(t, g, claimed)
		// An Execute of another replica waits for this attempt: no event.
		waited, err := g.st.OperationMarkWaited(ctx, "acme", op.ID, claimed.Fence)
		require.NoError(t, err)
		require.True(t, waited)
		out := outcome(claimed, "FAILED", func(tr *store.TransitionParams) {
			tr.SetError, tr.Error = true, []byte(`{"reason":"DOWNSTREAM_REJECTED", "detail":"no"}`)
		})
		require.True(t, out.Waited)
	})

	t.Run("reconciler's claim between the read and the write", func(t *testing.T) {
		op := insert(newOp(func(no *store.NewOperation) { no.Claim, no.Lease = &claim, lease }))
		unknown := outcome(op, "OUTCOME_UNKNOWN", func(tr *store.TransitionParams) { tr.ReconcileAfter = -time.Second })
		// A reconciler picks it up: reconcile_attempts and next_reconcile_at
		// change, no event.
		picked, err := g.st.OperationClaimUnresolved(ctx, 100, time.Minute, time.Hour)
		require.NoError(t, err)
		require.NotEmpty(t, picked)
		again := outcome(unknown, "OUTCOME_UNKNOWN", func(tr *store.TransitionParams) { tr.ReconcileAfter = time.Minute })
		require.Equal(t, int32(1), again.ReconcileAttempts)
	})

	t.Run("a base that is not the version changed is read again", func(t *testing.T) {
		op := insert(newOp(nil))
		// Another change the guard does not see (an event of its own).
		require.NoError(t, g.st.Exec(ctx, `UPDATE operation SET approval_reason = 'changed', events = events + 1 WHERE id = $1`, op.ID))
		out := outcome(op, "CANCELLED", nil)
		require.Equal(t, "changed", out.ApprovalReason)
		// And no base at all.
		op = insert(newOp(nil))
		outcome(op, "CANCELLED", func(tr *store.TransitionParams) { tr.Base = store.Operation{} })
	})
}

// TestClaimWithACopyIsTheStoredRow: a claim given the caller's copy of the
// operation (Claim.Base) returns only what it changes and completes the row
// from the copy when the copy is the version it changed, and from a read
// otherwise or when the claim did not take (docs/performance.md, finding 32). Whatever happened to
// the row since the copy, the claim returns the row as stored.
func TestClaimWithACopyIsTheStoredRow(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	lease, claim := writtenLease, readyClaim
	n := 0
	insert := func(mod func(*store.NewOperation)) store.Operation {
		n++
		op, inserted, err := g.st.OperationInsert(ctx, writtenOp("op_copy"+string(rune('a'+n)), mod))
		require.NoError(t, err)
		require.True(t, inserted)
		return op
	}
	claimWith := func(base store.Operation) (store.Operation, bool) {
		cl := claim
		cl.Base = base
		op, claimed, err := g.st.OperationClaim(ctx, "acme", base.ID, cl, lease)
		require.NoError(t, err)
		requireStored(t, g, op)
		return op, claimed
	}

	t.Run("the copy the Prepare wrote", func(t *testing.T) {
		op, claimed := claimWith(insert(nil))
		require.True(t, claimed)
		require.Equal(t, "EXECUTING", op.State)
		require.Equal(t, "srv_a", op.LeaseOwner)
	})

	t.Run("a change without an event since the copy", func(t *testing.T) {
		base := insert(nil)
		require.NoError(t, g.st.Exec(ctx, `UPDATE operation SET reconcile_attempts = 7, waited = true WHERE id = $1`, base.ID))
		op, claimed := claimWith(base)
		require.True(t, claimed)
		require.EqualValues(t, 7, op.ReconcileAttempts)
		require.False(t, op.Waited, "a claim starts a new attempt nobody waits for yet")
	})

	t.Run("a change with an event since the copy is read", func(t *testing.T) {
		base := insert(nil)
		require.NoError(t, g.st.Exec(ctx, `UPDATE operation SET approval_reason = 'changed', events = events + 1 WHERE id = $1`, base.ID))
		op, claimed := claimWith(base)
		require.True(t, claimed)
		require.Equal(t, "changed", op.ApprovalReason)
	})

	t.Run("claimed elsewhere since the copy", func(t *testing.T) {
		base := insert(nil)
		_, claimed, err := g.st.OperationClaim(ctx, "acme", base.ID, claim, store.Lease{Owner: "srv_b", Duration: time.Minute, Actor: "b"})
		require.NoError(t, err)
		require.True(t, claimed)
		op, claimed := claimWith(base)
		require.False(t, claimed)
		require.Equal(t, "srv_b", op.LeaseOwner)
	})

	t.Run("not claimable, the copy current", func(t *testing.T) {
		base := insert(func(no *store.NewOperation) { no.ApprovalRequired = true }) // READY, no approval in force
		op, claimed := claimWith(base)
		require.False(t, claimed)
		require.Equal(t, "READY", op.State)
	})
}

// TestClaimWithAnOutdatedCopyBetweenItsStatements: a claim given an outdated
// copy (and a transition given an outdated base) reads the row again after
// its statement committed. What happens
// between the two statements is staged there: the claim is the caller's
// only if the row is still the version it wrote; a row gone since is
// ErrUnavailable, never an unknown operation; and a caller who gives up in
// between still gets its claim, which committed, rather than leave the
// operation claimed with nothing sent until its lease expires.
func TestClaimWithAnOutdatedCopyBetweenItsStatements(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	n := 0
	// outdated is a READY operation and a copy of it from before a change
	// with an event, so that the claim reads the row again.
	outdated := func() store.Operation {
		n++
		base, inserted, err := g.st.OperationInsert(t.Context(), writtenOp("op_between"+string(rune('a'+n)), nil))
		require.NoError(t, err)
		require.True(t, inserted)
		require.NoError(t, g.st.Exec(t.Context(), `UPDATE operation SET approval_reason = 'changed', events = events + 1 WHERE id = $1`, base.ID))
		return base
	}
	// claimBetween claims with base's copy and runs between after the claim's
	// statement, before the read.
	claimBetween := func(ctx context.Context, base store.Operation, between func()) (store.Operation, bool, error) {
		cl := readyClaim
		cl.Base = base
		c := g.st.ConnBefore(func(n int) {
			if n == 2 {
				between()
			}
		})
		return c.OperationClaim(ctx, "acme", base.ID, cl, writtenLease)
	}

	t.Run("changed again after the claim", func(t *testing.T) {
		base := outdated()
		op, claimed, err := claimBetween(t.Context(), base, func() {
			// Another replica took the lease over, as after an expiry.
			require.NoError(t, g.st.Exec(t.Context(), `UPDATE operation SET lease_owner = 'srv_b', fence = fence + 1, events = events + 1 WHERE id = $1`, base.ID))
		})
		require.NoError(t, err)
		require.False(t, claimed, "what this caller holds is no longer the claim's attempt")
		require.Equal(t, "srv_b", op.LeaseOwner)
		requireStored(t, g, op)
	})

	t.Run("gone after the claim", func(t *testing.T) {
		base := outdated()
		_, claimed, err := claimBetween(t.Context(), base, func() {
			require.NoError(t, g.st.Exec(t.Context(), `DELETE FROM operation WHERE id = $1`, base.ID))
		})
		require.ErrorIs(t, err, store.ErrUnavailable, "a claimed operation is never reported unknown")
		require.NotErrorIs(t, err, store.ErrNotFound)
		require.False(t, claimed)
	})

	t.Run("the caller gives up after the claim", func(t *testing.T) {
		base := outdated()
		ctx, cancel := context.WithCancel(t.Context())
		op, claimed, err := claimBetween(ctx, base, cancel)
		require.NoError(t, err)
		require.True(t, claimed, "the claim committed")
		require.Equal(t, "EXECUTING", op.State)
		require.Equal(t, "changed", op.ApprovalReason)
		requireStored(t, g, op)
	})

	t.Run("a transition's row gone after it", func(t *testing.T) {
		base := outdated()
		c := g.st.ConnBefore(func(n int) {
			if n == 2 {
				require.NoError(t, g.st.Exec(t.Context(), `DELETE FROM operation WHERE id = $1`, base.ID))
			}
		})
		_, err := c.OperationTransition(t.Context(), store.TransitionParams{Tenant: "acme", ID: base.ID, From: []string{"READY"},
			To: "CANCELLED", Event: "CANCELLED", Actor: "agent", Base: base})
		require.ErrorIs(t, err, store.ErrUnavailable, "a transition that committed is never reported a failed guard")
		require.NotErrorIs(t, err, store.ErrNotFound)
	})
}
