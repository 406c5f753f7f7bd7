package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/store"
)

// The store's own suite for its guarded statements: each statement is run
// against rows put in every relevant shape (state, fence, what was sent,
// lease and approval on either side of their end, on the database's clock),
// and must change exactly the rows its guards allow. The ledger's table
// decides which guards each transition asks for (ledger/state.go); this
// suite shows that the statements enforce them. (allStates is in list_test.go.)

type guardDB struct {
	st   *store.Store
	pool *pgxpool.Pool
	seq  int
}

func newGuardDB(t *testing.T) *guardDB {
	t.Helper()
	g, _ := openGuardDB(t)
	return g
}

// openGuardDB is newGuardDB with the database's URL, for a test that
// opens more of its own.
func openGuardDB(t *testing.T) (*guardDB, string) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	_, err := store.Migrate(t.Context(), url)
	require.NoError(t, err)
	st, err := store.Open(t.Context(), store.Config{URL: url, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &guardDB{st: st, pool: pool}, url
}

// shape is a row as a test wants it; durations are relative to the
// database's now() (negative: in the past), nil leaves the column NULL.
type shape struct {
	state          string
	fence          int64
	firstSent      int64 // 0: NULL
	approval       bool
	approvalEnds   *time.Duration
	leaseEnds      *time.Duration
	firstClaimedAt *time.Duration
}

func d(x time.Duration) *time.Duration { return &x }

func secs(x *time.Duration) any {
	if x == nil {
		return nil
	}
	return x.Seconds()
}

// row inserts an operation and forces it into s.
func (g *guardDB) row(t *testing.T, s shape) string {
	t.Helper()
	g.seq++
	id := fmt.Sprintf("op_guard%018d", g.seq)
	_, inserted, err := g.st.OperationInsert(t.Context(), store.NewOperation{ID: id, Tenant: "acme", Tool: "pay", ToolVersion: "1",
		IdempotencyKey: id, Args: []byte(`{}`), Fingerprint: "v1:x", State: "READY", PreparedBy: "pr_a",
		ApprovalRequired: s.approval, ApprovalTTL: time.Minute, DownstreamKey: "opk_" + id, Actor: "test"})
	require.NoError(t, err)
	require.True(t, inserted)
	var firstSent any
	if s.firstSent > 0 {
		firstSent = s.firstSent
	}
	leaseOwner := any(nil)
	if s.leaseEnds != nil {
		leaseOwner = "srv_test"
	}
	_, err = g.pool.Exec(t.Context(), `UPDATE operation SET state = $2, fence = $3::bigint, first_sent_fence = $4::bigint,
		approval_expires_at = now() + make_interval(secs => $5::float8),
		lease_owner = $6, lease_expires_at = now() + make_interval(secs => $7::float8),
		first_claimed_at = now() + make_interval(secs => $8::float8), attempts = $3::int
		WHERE id = $1`, id, s.state, s.fence, firstSent, secs(s.approvalEnds), leaseOwner, secs(s.leaseEnds), secs(s.firstClaimedAt))
	require.NoError(t, err)
	return id
}

func (g *guardDB) get(t *testing.T, id string) store.Operation {
	t.Helper()
	op, err := g.st.OperationGet(t.Context(), "acme", id)
	require.NoError(t, err)
	return op
}

// executing is a row some executor claimed (fence 2), its lease still held.
func executing() shape {
	return shape{state: "EXECUTING", fence: 2, leaseEnds: d(time.Minute), firstClaimedAt: d(-time.Second)}
}

func TestTransitionGuards(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := context.Background()
	tr := func(id string, mod func(*store.TransitionParams)) error {
		x := store.TransitionParams{Tenant: "acme", ID: id, From: []string{"EXECUTING", "OUTCOME_UNKNOWN"}, Fence: 2,
			To: "FAILED", Event: "FAILED", Actor: "test"}
		if mod != nil {
			mod(&x)
		}
		_, err := g.st.OperationTransition(ctx, x)
		return err
	}

	t.Run("from-states", func(t *testing.T) {
		for _, state := range allStates {
			s := shape{state: state, fence: 2}
			if state == "EXECUTING" {
				s = executing()
			}
			err := tr(g.row(t, s), nil)
			if state == "EXECUTING" || state == "OUTCOME_UNKNOWN" {
				require.NoError(t, err, state)
			} else {
				require.ErrorIs(t, err, store.ErrConditionFailed, "%s is not a from-state", state)
			}
		}
	})
	t.Run("stale fence", func(t *testing.T) {
		id := g.row(t, executing())
		require.ErrorIs(t, tr(id, func(x *store.TransitionParams) { x.Fence = 1 }), store.ErrConditionFailed)
		require.ErrorIs(t, tr(id, func(x *store.TransitionParams) { x.Fence = 3 }), store.ErrConditionFailed)
		require.Equal(t, "EXECUTING", g.get(t, id).State)
	})
	t.Run("lease", func(t *testing.T) {
		expire := func(x *store.TransitionParams) { x.RequireLeaseExpired = true }
		live := executing()
		live.leaseEnds = d(2 * time.Second)
		require.ErrorIs(t, tr(g.row(t, live), expire), store.ErrConditionFailed, "the lease still runs for 2 s")
		gone := executing()
		gone.leaseEnds = d(-2 * time.Second)
		require.NoError(t, tr(g.row(t, gone), expire), "the lease ended 2 s ago")
		require.NoError(t, tr(g.row(t, shape{state: "OUTCOME_UNKNOWN", fence: 2}), expire), "no lease to wait for")
	})
	t.Run("unsent", func(t *testing.T) {
		unsent := func(x *store.TransitionParams) {
			x.From, x.To, x.Event, x.RequireUnsent = []string{"READY"}, "CANCELLED", "CANCELLED", true
		}
		require.NoError(t, tr(g.row(t, shape{state: "READY", fence: 2}), unsent), "claimed and released, never sent")
		require.ErrorIs(t, tr(g.row(t, shape{state: "READY", fence: 2, firstSent: 1}), unsent), store.ErrConditionFailed)
	})
	t.Run("sent if ready", func(t *testing.T) {
		report := func(x *store.TransitionParams) {
			x.From, x.To, x.Event, x.RequireSentIfReady = []string{"READY", "EXECUTING", "OUTCOME_UNKNOWN"}, "SUCCEEDED", "RECONCILED", true
		}
		require.NoError(t, tr(g.row(t, shape{state: "READY", fence: 2, firstSent: 1}), report), "READY after a send")
		require.ErrorIs(t, tr(g.row(t, shape{state: "READY", fence: 2}), report), store.ErrConditionFailed, "READY, nothing ever sent")
		require.NoError(t, tr(g.row(t, executing()), report), "the guard is about READY only")
	})
	t.Run("first send", func(t *testing.T) {
		first := func(x *store.TransitionParams) { x.RequireFirstSend = true }
		s := executing()
		require.NoError(t, tr(g.row(t, s), first), "nothing sent before this attempt")
		s.firstSent = 2
		require.NoError(t, tr(g.row(t, shape{state: "OUTCOME_UNKNOWN", fence: 2, firstSent: 2}), first), "this attempt was the first send")
		s.firstSent = 1
		require.ErrorIs(t, tr(g.row(t, s), first), store.ErrConditionFailed, "attempt 1 may have taken effect")
	})
	t.Run("key window", func(t *testing.T) {
		window := func(ahead time.Duration) func(*store.TransitionParams) {
			return func(x *store.TransitionParams) {
				x.From, x.To, x.Event = []string{"OUTCOME_UNKNOWN"}, "READY", "RECONCILED"
				x.KeyWindow = store.KeyWindow{Retention: 10 * time.Second, Ahead: ahead, Factor: 0.9}
			}
		}
		s := shape{state: "OUTCOME_UNKNOWN", fence: 2, firstSent: 2}
		s.firstClaimedAt = d(-7 * time.Second)
		require.NoError(t, tr(g.row(t, s), window(0)), "7 s into a 9 s window")
		require.ErrorIs(t, tr(g.row(t, s), func(x *store.TransitionParams) { window(0)(x); x.KeyWindow.Factor = 0.5 }),
			store.ErrConditionFailed, "the factor is the caller's: 7 s past a 5 s window")
		require.ErrorIs(t, tr(g.row(t, s), window(3*time.Second)), store.ErrConditionFailed, "would land 10 s in")
		s.firstClaimedAt = d(-10 * time.Second)
		require.ErrorIs(t, tr(g.row(t, s), window(0)), store.ErrConditionFailed, "past 90% of the retention")
		require.NoError(t, tr(g.row(t, s), func(x *store.TransitionParams) {
			x.From, x.To, x.Event = []string{"OUTCOME_UNKNOWN"}, "READY", "RECONCILED"
		}), "no retention: the downstream never forgets")
	})
	t.Run("marks sent", func(t *testing.T) {
		end := func(event, to string) func(*store.TransitionParams) {
			return func(x *store.TransitionParams) { x.From, x.Event, x.To = []string{"EXECUTING"}, event, to }
		}
		id := g.row(t, executing())
		require.NoError(t, tr(id, end("RELEASED", "READY")))
		require.Zero(t, g.get(t, id).FirstSentFence, "a release sent nothing")
		id = g.row(t, executing())
		require.NoError(t, tr(id, end("OUTCOME_UNKNOWN", "OUTCOME_UNKNOWN")))
		require.EqualValues(t, 2, g.get(t, id).FirstSentFence)
		s := executing()
		s.firstSent = 1
		id = g.row(t, s)
		require.NoError(t, tr(id, end("SUCCEEDED", "SUCCEEDED")))
		require.EqualValues(t, 1, g.get(t, id).FirstSentFence, "the first send stays the first")
	})
}

// TestClaimGuards runs the claim's guard in both its statements: with the
// caller's copy of the operation (OperationClaimKnown, which returns only
// what it changes) and without (OperationClaim).
func TestClaimGuards(t *testing.T) {
	t.Parallel()
	for _, known := range []bool{false, true} {
		t.Run(fmt.Sprintf("known %t", known), func(t *testing.T) {
			t.Parallel()
			testClaimGuards(t, known)
		})
	}
}

func testClaimGuards(t *testing.T, known bool) {
	g := newGuardDB(t)
	lease := store.Lease{Owner: "srv_test", Duration: 30 * time.Second, Actor: "test"}
	claim := func(id string) (store.Operation, bool) {
		cl := store.Claim{From: "READY", To: "EXECUTING", Event: "CLAIMED", RequireApprovalInForce: true}
		if known {
			cl.Base = g.get(t, id)
		}
		op, claimed, err := g.st.OperationClaim(t.Context(), "acme", id, cl, lease)
		require.NoError(t, err)
		stored, got := g.get(t, id), op
		require.False(t, op.DBNow.IsZero(), "the row carries the database's clock")
		got.DBNow, stored.DBNow = time.Time{}, time.Time{}
		require.Equal(t, stored, got, "the claim returns the row as stored")
		return op, claimed
	}
	for _, state := range allStates {
		s := shape{state: state, fence: 1}
		if state == "EXECUTING" {
			s = executing()
		}
		op, claimed := claim(g.row(t, s))
		require.Equal(t, state == "READY", claimed, state)
		require.False(t, op.DBNow.IsZero(), "the row carries the database's clock")
	}
	op, claimed := claim(g.row(t, shape{state: "READY", fence: 1}))
	require.True(t, claimed)
	require.EqualValues(t, 2, op.Fence)
	require.EqualValues(t, 2, op.Attempts)
	require.InDelta(t, 30, op.LeaseExpiresAt.Sub(op.DBNow).Seconds(), 0.01, "the lease is measured on the database's clock")

	_, claimed = claim(g.row(t, shape{state: "READY", approval: true, approvalEnds: d(2 * time.Second)}))
	require.True(t, claimed, "the approval runs 2 s more")
	_, claimed = claim(g.row(t, shape{state: "READY", approval: true, approvalEnds: d(-2 * time.Second)}))
	require.False(t, claimed, "the approval ended 2 s ago")
	_, claimed = claim(g.row(t, shape{state: "READY", fence: 3, approval: true, approvalEnds: d(-2 * time.Second)}))
	require.False(t, claimed, "claimed and released three times: nothing was sent, so the lapse holds")
	_, claimed = claim(g.row(t, shape{state: "READY", fence: 1, firstSent: 1, approval: true, approvalEnds: d(-2 * time.Second)}))
	require.True(t, claimed, "a send consumed the approval: resubmit the same key")
}

func TestTakeOverGuards(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	lease := store.Lease{Owner: "srv_b", Duration: 30 * time.Second, Actor: "test"}
	take := func(id string, fence int64, w store.KeyWindow) (store.Operation, error) {
		return g.st.OperationTakeOver(t.Context(), store.TakeOver{Tenant: "acme", ID: id, From: "EXECUTING", Event: "LEASE_TAKEN_OVER",
			Fence: fence, KeyWindow: w}, lease)
	}
	live := executing()
	live.leaseEnds = d(2 * time.Second)
	_, err := take(g.row(t, live), 2, store.KeyWindow{})
	require.ErrorIs(t, err, store.ErrConditionFailed, "the lease runs 2 s more")

	gone := executing()
	gone.leaseEnds = d(-2 * time.Second)
	id := g.row(t, gone)
	_, err = take(id, 1, store.KeyWindow{})
	require.ErrorIs(t, err, store.ErrConditionFailed, "stale fence")
	op, err := take(id, 2, store.KeyWindow{})
	require.NoError(t, err)
	require.EqualValues(t, 3, op.Fence)
	require.EqualValues(t, 2, op.FirstSentFence, "the fenced-out holder may have sent")
	_, err = take(id, 2, store.KeyWindow{})
	require.ErrorIs(t, err, store.ErrConditionFailed, "taken once")

	for _, state := range allStates {
		if state == "EXECUTING" {
			continue
		}
		_, err := take(g.row(t, shape{state: state, fence: 2}), 2, store.KeyWindow{})
		require.ErrorIs(t, err, store.ErrConditionFailed, state)
	}
	late := gone
	late.firstClaimedAt = d(-5 * time.Second)
	_, err = take(g.row(t, late), 2, store.KeyWindow{Retention: 10 * time.Second, Ahead: 5 * time.Second, Factor: 0.9})
	require.ErrorIs(t, err, store.ErrConditionFailed, "the resubmission could land past 90% of the retention")
	_, err = take(g.row(t, late), 2, store.KeyWindow{Retention: 10 * time.Second, Ahead: 3 * time.Second, Factor: 0.9})
	require.NoError(t, err)
}

func TestDecideGuards(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	expire := func(id string, from ...string) error {
		_, err := g.st.OperationDecide(t.Context(), store.Decision{Tenant: "acme", ID: id, From: from, To: "AWAITING_APPROVAL",
			Event: "APPROVAL_EXPIRED", Actor: "test", RequireLapsedUnsent: true})
		return err
	}
	require.ErrorIs(t, expire(g.row(t, shape{state: "READY", approval: true, approvalEnds: d(2 * time.Second)}), "READY"), store.ErrConditionFailed,
		"in force for 2 s more")
	require.NoError(t, expire(g.row(t, shape{state: "READY", approval: true, approvalEnds: d(-2 * time.Second)}), "READY"))
	require.NoError(t, expire(g.row(t, shape{state: "READY", fence: 2, approval: true, approvalEnds: d(-2 * time.Second)}), "READY"),
		"claimed and released: nothing sent")
	require.ErrorIs(t, expire(g.row(t, shape{state: "READY", fence: 2, firstSent: 1, approval: true, approvalEnds: d(-2 * time.Second)}), "READY"),
		store.ErrConditionFailed, "sent: the approval was consumed and never lapses")
	require.ErrorIs(t, expire(g.row(t, shape{state: "OUTCOME_UNKNOWN", fence: 1, firstSent: 1, approval: true, approvalEnds: d(-2 * time.Second)}), "READY"),
		store.ErrConditionFailed, "not a from-state")
	approve := func(id string) error {
		_, err := g.st.OperationDecide(t.Context(), store.Decision{Tenant: "acme", ID: id, From: []string{"AWAITING_APPROVAL", "READY"},
			To: "READY", Decision: "APPROVE", DecidedBy: "pr_b", ApprovedFingerprint: "v1:x", Event: "APPROVED", Actor: "test",
			RequireLapsedUnsent: true})
		return err
	}
	require.NoError(t, approve(g.row(t, shape{state: "AWAITING_APPROVAL", approval: true})), "the lapse concerns READY only")
	require.ErrorIs(t, approve(g.row(t, shape{state: "READY", approval: true, approvalEnds: d(2 * time.Second)})), store.ErrConditionFailed)
	id := g.row(t, shape{state: "READY", approval: true, approvalEnds: d(-2 * time.Second)})
	require.NoError(t, approve(id))
	op := g.get(t, id)
	require.InDelta(t, 60, op.ApprovalExpiresAt.Sub(op.UpdatedAt).Seconds(), 0.01, "renewed for the TTL on the database's clock")
}

// TestOnlyWaitedOutcomesNotify: an attempt that ends notifies only when an
// Execute marked it as waited for (migration 0009). Notifications arrive in
// commit order, so the first one a listener gets after an unwaited outcome
// and then a waited one must be the waited one's.
func TestOnlyWaitedOutcomesNotify(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	conn, err := g.pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(t.Context(), "LISTEN opledger_operation")
	require.NoError(t, err)
	end := func(id string) {
		_, err := g.st.OperationTransition(t.Context(), store.TransitionParams{Tenant: "acme", ID: id, From: []string{"EXECUTING"},
			Fence: 2, To: "SUCCEEDED", Event: "SUCCEEDED", Actor: "test"})
		require.NoError(t, err)
	}
	unwaited, waited := g.row(t, executing()), g.row(t, executing())
	marked, err := g.st.OperationMarkWaited(t.Context(), "acme", waited, 1)
	require.NoError(t, err)
	require.False(t, marked, "a stale fence marks nothing")
	marked, err = g.st.OperationMarkWaited(t.Context(), "acme", waited, 2)
	require.NoError(t, err)
	require.True(t, marked)
	end(unwaited)
	end(waited)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, waited, n.Payload)
	marked, err = g.st.OperationMarkWaited(t.Context(), "acme", waited, 2)
	require.NoError(t, err)
	require.False(t, marked, "the attempt ended: nothing left to wait for")
}
