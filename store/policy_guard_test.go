package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/store"
)

// policyRow is a READY operation judged under digest, needing needed
// approvals, with approvals already given by the principals named.
func (g *guardDB) policyRow(t *testing.T, s shape, digest string, needed int32, approvers ...string) string {
	t.Helper()
	id := g.row(t, s)
	list := `[]`
	if len(approvers) > 0 {
		list = `[`
		for i, p := range approvers {
			if i > 0 {
				list += `,`
			}
			list += `{"principal_id":"` + p + `","decision":"APPROVE"}`
		}
		list += `]`
	}
	_, err := g.pool.Exec(t.Context(), `UPDATE operation SET policy_digest = $2, approvals_needed = $3, approvals = $4::jsonb WHERE id = $1`,
		id, digest, needed, list)
	require.NoError(t, err)
	return id
}

// TestClaimRequiresThePolicyInForce: the claim sends an operation nothing
// was sent for only if it was judged under one of the digests the caller
// holds current; one sent before is driven to its outcome whatever its
// digest.
func TestClaimRequiresThePolicyInForce(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	lease := store.Lease{Owner: "srv", Duration: time.Minute, Actor: "test"}
	cl := store.Claim{From: "READY", To: "EXECUTING", Event: "CLAIMED", RequirePolicyCurrent: true, PolicyDigests: []string{"new", "other"}}
	for _, c := range []struct {
		name      string
		digest    string
		firstSent int64
		claims    bool
	}{
		{"judged under the policy in force", "new", 0, true},
		{"judged under another tool's current policy", "other", 0, true},
		{"judged under an older policy", "old", 0, false},
		{"from before policies", "", 0, false},
		{"sent before, under an older policy", "old", 1, true},
	} {
		id := g.policyRow(t, shape{state: "READY", fence: 1, firstSent: c.firstSent}, c.digest, 0)
		_, claimed, err := g.st.OperationClaim(t.Context(), "acme", id, cl, lease)
		require.NoError(t, err, c.name)
		require.Equal(t, c.claims, claimed, c.name)
		// Without the guard every one of them is claimed (the control).
		if !c.claims {
			off := cl
			off.RequirePolicyCurrent = false
			_, claimed, err := g.st.OperationClaim(t.Context(), "acme", id, off, lease)
			require.NoError(t, err)
			require.True(t, claimed, c.name)
		}
	}
}

// TestPolicyApplyGuards: the judgement of a policy change applies once, to
// the digest it was read with, never after a send, and only on the side of
// the quorum the caller found.
func TestPolicyApplyGuards(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	apply := func(id string, mod func(*store.PolicyApply)) (store.Operation, error) {
		p := store.PolicyApply{Tenant: "acme", ID: id, From: []string{"READY"}, To: "AWAITING_APPROVAL", OldDigest: "old",
			PolicyDigest: "new", ApprovalsNeeded: 2, ApprovalTTL: time.Minute, ApprovalRule: "approval.required",
			RequireShort: true, Event: "POLICY_CHANGED", Actor: "test"}
		if mod != nil {
			mod(&p)
		}
		return g.st.OperationPolicyApply(t.Context(), p)
	}
	t.Run("short of a raised quorum", func(t *testing.T) {
		id := g.policyRow(t, shape{state: "READY", fence: 0, approval: true, approvalEnds: d(time.Minute)}, "old", 1, "pr_b")
		op, err := apply(id, nil)
		require.NoError(t, err)
		require.Equal(t, "AWAITING_APPROVAL", op.State)
		require.EqualValues(t, 2, op.ApprovalsNeeded)
		require.Equal(t, "new", op.PolicyDigest)
		require.JSONEq(t, `[{"principal_id":"pr_b","decision":"APPROVE"}]`, string(op.Approvals), "an approval in force keeps counting")
		require.True(t, op.ApprovalExpiresAt.IsZero())
		_, err = apply(id, nil)
		require.ErrorIs(t, err, store.ErrConditionFailed, "applied once: the digest moved on")
	})
	t.Run("a lapsed approval does not count", func(t *testing.T) {
		id := g.policyRow(t, shape{state: "READY", fence: 0, approval: true, approvalEnds: d(-time.Second)}, "old", 1, "pr_b")
		op, err := apply(id, nil)
		require.NoError(t, err)
		require.JSONEq(t, `[]`, string(op.Approvals))
	})
	t.Run("another digest", func(t *testing.T) {
		id := g.policyRow(t, shape{state: "READY", fence: 0}, "older", 0)
		_, err := apply(id, nil)
		require.ErrorIs(t, err, store.ErrConditionFailed)
	})
	t.Run("sent before", func(t *testing.T) {
		id := g.policyRow(t, shape{state: "READY", fence: 1, firstSent: 1}, "old", 0)
		_, err := apply(id, nil)
		require.ErrorIs(t, err, store.ErrConditionFailed)
		_, err = apply(id, func(p *store.PolicyApply) { p.To, p.Event, p.RequireShort = "REJECTED", "POLICY_CHANGED", false })
		require.ErrorIs(t, err, store.ErrConditionFailed, "never rejected after a send")
	})
	t.Run("the quorum's side", func(t *testing.T) {
		met := g.policyRow(t, shape{state: "READY", fence: 0, approval: true, approvalEnds: d(time.Minute)}, "old", 2, "pr_b", "pr_c")
		_, err := apply(met, nil)
		require.ErrorIs(t, err, store.ErrConditionFailed, "not short: two of two")
		op, err := apply(met, func(p *store.PolicyApply) {
			p.To, p.Event, p.RequireShort, p.RequireMet = "READY", "POLICY_CHECKED", false, true
		})
		require.NoError(t, err)
		require.Equal(t, "READY", op.State)
		short := g.policyRow(t, shape{state: "READY", fence: 0}, "old", 0)
		_, err = apply(short, func(p *store.PolicyApply) {
			p.To, p.Event, p.RequireShort, p.RequireMet = "READY", "POLICY_CHECKED", false, true
		})
		require.ErrorIs(t, err, store.ErrConditionFailed, "not met: none of two")
	})
	t.Run("the quorum only grows", func(t *testing.T) {
		id := g.policyRow(t, shape{state: "READY", fence: 0, approval: true, approvalEnds: d(time.Minute)}, "old", 3, "pr_b")
		op, err := apply(id, func(p *store.PolicyApply) { p.ApprovalsNeeded = 1 })
		require.NoError(t, err)
		require.EqualValues(t, 3, op.ApprovalsNeeded)
	})
}

// TestDecideCountsTheQuorum: an approval makes the operation READY exactly
// at the quorum, and a principal is counted once per round.
func TestDecideCountsTheQuorum(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	two := int32(2)
	dec := func(id, by, to string) (store.Operation, error) {
		return g.st.OperationDecide(t.Context(), store.Decision{Tenant: "acme", ID: id, From: []string{"AWAITING_APPROVAL"}, To: to,
			Decision: "APPROVE", DecidedBy: by, DecidedByName: by, ApprovedFingerprint: "v1:x", Event: "APPROVED", Actor: by,
			ApprovalsNeeded: &two})
	}
	id := g.policyRow(t, shape{state: "AWAITING_APPROVAL", fence: 0, approval: true}, "d", 2)
	_, err := dec(id, "pr_b", "READY")
	require.ErrorIs(t, err, store.ErrConditionFailed, "READY at the first of two")
	op, err := dec(id, "pr_b", "AWAITING_APPROVAL")
	require.NoError(t, err)
	_, err = dec(id, "pr_b", "AWAITING_APPROVAL")
	require.ErrorIs(t, err, store.ErrConditionFailed, "the same principal twice")
	_, err = dec(id, "pr_b", "READY")
	require.ErrorIs(t, err, store.ErrConditionFailed, "the same principal twice")
	_, err = dec(id, "pr_c", "AWAITING_APPROVAL")
	require.ErrorIs(t, err, store.ErrConditionFailed, "still waiting at the second of two")
	op, err = dec(id, "pr_c", "READY")
	require.NoError(t, err)
	require.Equal(t, "READY", op.State)
	require.False(t, op.ApprovalExpiresAt.IsZero(), "the window runs from the approval that completes the quorum")
	var n int
	require.NoError(t, g.pool.QueryRow(t.Context(), `SELECT jsonb_array_length(approvals) FROM operation WHERE id = $1`, id).Scan(&n))
	require.Equal(t, 2, n)
}

// TestBudgetAndIdentityGuards: a reservation is admitted while it fits and
// refused past the bound, an operation holding a share is admitted again
// without a second one, a forced share is taken and said not to fit, and
// the pruner deletes only budgets and identities nothing counts in.
func TestBudgetAndIdentityGuards(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	r := store.Reservation{Tenant: "acme", Name: "two", Scope: "", MaxCount: 2, Window: time.Hour, MaxUses: 100}
	reserve := func(op string, mod func(*store.Reservation)) (bool, bool) {
		x := r
		x.OperationID = op
		if mod != nil {
			mod(&x)
		}
		res, err := g.st.BudgetReserve(ctx, []store.Reservation{x}, false, false)
		require.NoError(t, err)
		return res.Refused < 0, res.Over < 0
	}
	a, _ := reserve("op_1", nil)
	require.True(t, a)
	a, _ = reserve("op_2", nil)
	require.True(t, a)
	a, _ = reserve("op_3", nil)
	require.False(t, a, "past the count")
	a, _ = reserve("op_1", nil)
	require.False(t, a, "a new operation is never taken for one that holds a share")
	res, err := g.st.BudgetReserve(ctx, []store.Reservation{{Tenant: "acme", Name: "two", OperationID: "op_1", MaxCount: 2,
		Window: time.Hour, MaxUses: 100}}, false, true)
	require.NoError(t, err)
	require.Equal(t, store.Reserved{Refused: -1, Over: -1}, res, "renewing: op_1 holds a share")
	a, fits := reserve("op_4", func(x *store.Reservation) { x.Force = true })
	require.True(t, a)
	require.False(t, fits, "forced past the count")
	uses, _, err := g.st.BudgetGet(ctx, "acme", "two", "", time.Hour)
	require.NoError(t, err)
	g.requireBudgetsExact(t)
	require.Len(t, uses, 3, "op_1 counted once, op_4 forced in")

	// Sums: exact, not conservative.
	s := store.Reservation{Tenant: "acme", Name: "sum", MaxCount: 0, HasSum: true, MaxSum: 100, Window: time.Hour, MaxUses: 100}
	for i, c := range []struct {
		amount float64
		ok     bool
	}{{60, true}, {41, false}, {40, true}, {0.5, false}, {0, true}} {
		x := s
		x.OperationID, x.Amount = fmt.Sprintf("op_s%d", i), c.amount
		res, err := g.st.BudgetReserve(ctx, []store.Reservation{x}, true, false)
		require.NoError(t, err)
		require.Equal(t, c.ok, res.Refused < 0, "%v", c)
	}
	g.requireBudgetsExact(t)

	// Pruning: a budget whose entries left the window goes; one in use stays.
	old := store.Reservation{Tenant: "acme", Name: "brief", OperationID: "op_b", MaxCount: 5, Window: time.Millisecond, MaxUses: 100}
	_, err = g.st.BudgetReserve(ctx, []store.Reservation{old}, false, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := g.st.BudgetPrune(ctx, 100)
		require.NoError(t, err)
		return n == 1
	}, 10*time.Second, 20*time.Millisecond)
	var n int
	require.NoError(t, g.pool.QueryRow(ctx, `SELECT count(*) FROM budget WHERE tenant = 'acme'`).Scan(&n))
	require.Equal(t, 2, n, "the budgets in use stay")

	held, err := g.st.IdentityReserve(ctx, "acme", "pay", "INV-1", "op_i1", "k1", time.Hour)
	require.NoError(t, err)
	require.False(t, held)
	held, err = g.st.IdentityReserve(ctx, "acme", "pay", "INV-1", "op_i2", "k2", time.Hour)
	require.NoError(t, err)
	require.True(t, held, "another key")
	held, err = g.st.IdentityReserve(ctx, "acme", "pay", "INV-1", "op_i3", "k1", time.Hour)
	require.NoError(t, err)
	require.False(t, held, "the holder's own key")
	pruned, err := g.st.IdentityPrune(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, pruned, "a held identity stays")
	_, err = g.pool.Exec(ctx, `UPDATE operation_identity SET free_at = '-infinity' WHERE identity = 'INV-1'`)
	require.NoError(t, err)
	pruned, err = g.st.IdentityPrune(ctx, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, pruned)
}

// waitForLock waits until one session of the test's database runs the
// store statement named stmt and waits for a lock.
func (g *guardDB) waitForLock(t *testing.T, stmt, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, g.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%name: ' || $1 || ' %'`, stmt).Scan(&n))
		return n == 1
	}, 10*time.Second, 10*time.Millisecond, what)
}

// requireBudgetsExact: every budget's count and sum are those of its uses.
func (g *guardDB) requireBudgetsExact(t *testing.T) {
	t.Helper()
	var bad int
	require.NoError(t, g.pool.QueryRow(t.Context(), `
		SELECT count(*) FROM budget b
		LEFT JOIN (SELECT tenant, name, scope, count(*) AS c, sum(amount) AS s FROM budget_use GROUP BY 1, 2, 3) u
		  ON (u.tenant, u.name, u.scope) = (b.tenant, b.name, b.scope)
		WHERE b.used_count <> coalesce(u.c, 0) OR b.used_sum <> coalesce(u.s, 0)`).Scan(&bad))
	require.Zero(t, bad, "budgets whose count or sum is not that of their uses")
	var orphans int
	require.NoError(t, g.pool.QueryRow(t.Context(), `
		SELECT count(*) FROM budget_use u WHERE NOT EXISTS (
			SELECT 1 FROM budget b WHERE (b.tenant, b.name, b.scope) = (u.tenant, u.name, u.scope))`).Scan(&orphans))
	require.Zero(t, orphans, "uses without their budget")
}

// TestBudgetReserveAllOrNone: an operation's shares of several budgets are
// reserved together or not at all, a released share frees its room at
// once, and a use that left the window is dropped by the next reservation
// (the count and sum stay those of the uses throughout).
func TestBudgetReserveAllOrNone(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	a := store.Reservation{Tenant: "acme", Name: "a", MaxCount: 10, Window: time.Hour, MaxUses: 100}
	b := store.Reservation{Tenant: "acme", Name: "b", HasSum: true, MaxSum: 100, Window: time.Hour, MaxUses: 100}
	both := func(op string, amount float64) store.Reserved {
		x, y := a, b
		x.OperationID, y.OperationID, y.Amount = op, op, amount
		res, err := g.st.BudgetReserve(ctx, []store.Reservation{x, y}, true, false)
		require.NoError(t, err)
		return res
	}
	require.Equal(t, store.Reserved{Refused: -1, Over: -1}, both("op_1", 70))
	require.Equal(t, store.Reserved{Refused: 1, Over: -1}, both("op_2", 40), "b has 30 left")
	uses, _, err := g.st.BudgetGet(ctx, "acme", "a", "", time.Hour)
	require.NoError(t, err)
	require.Len(t, uses, 1, "op_2 took no share of a either")
	g.requireBudgetsExact(t)

	require.NoError(t, g.st.BudgetRelease(ctx, "acme", "op_1", []string{"a", "b"}, []string{"", ""}))
	require.Equal(t, store.Reserved{Refused: -1, Over: -1}, both("op_2", 100), "op_1's release freed all of b")
	g.requireBudgetsExact(t)

	brief := store.Reservation{Tenant: "acme", Name: "brief", MaxCount: 1, Window: 50 * time.Millisecond, MaxUses: 100}
	brief.OperationID = "op_b1"
	res, err := g.st.BudgetReserve(ctx, []store.Reservation{brief}, false, false)
	require.NoError(t, err)
	require.Equal(t, -1, res.Refused)
	brief.OperationID = "op_b2"
	require.Eventually(t, func() bool {
		res, err := g.st.BudgetReserve(ctx, []store.Reservation{brief}, false, false)
		require.NoError(t, err)
		return res.Refused < 0
	}, 10*time.Second, 10*time.Millisecond, "room once op_b1 left the window")
	var left int
	require.NoError(t, g.pool.QueryRow(ctx, `SELECT count(*) FROM budget_use WHERE name = 'brief'`).Scan(&left))
	require.Equal(t, 1, left, "op_b1's use was dropped by the reservation that found room")
	g.requireBudgetsExact(t)
}

// TestIdentityControlStatements: the identity-select control's statements
// do what the control needs of them: IdentityGet reads who holds an
// identity without taking it, and IdentityTake takes it from a holder
// that IdentityReserve would have left it with.
func TestIdentityControlStatements(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	holder, key, held, err := g.st.IdentityGet(ctx, "acme", "pay", "INV-9")
	require.NoError(t, err)
	require.False(t, held)
	require.Empty(t, holder+key)
	held, err = g.st.IdentityReserve(ctx, "acme", "pay", "INV-9", "op_a", "ka", time.Hour)
	require.NoError(t, err)
	require.False(t, held)
	holder, key, held, err = g.st.IdentityGet(ctx, "acme", "pay", "INV-9")
	require.NoError(t, err)
	require.Equal(t, []any{"op_a", "ka", true}, []any{holder, key, held})
	require.NoError(t, g.st.IdentityTake(ctx, "acme", "pay", "INV-9", "op_b", "kb", time.Hour))
	holder, _, held, err = g.st.IdentityGet(ctx, "acme", "pay", "INV-9")
	require.NoError(t, err)
	require.Equal(t, "op_b", holder, "taken without the guard")
	require.True(t, held)
}

// payOp is a new operation id of the tool pay under key, as the insert
// tests store it; with an invoice, one that takes it as its business
// identity for window.
func payOp(id, key, invoice string, window time.Duration) store.NewOperation {
	n := store.NewOperation{ID: id, Tenant: "acme", Tool: "pay", ToolVersion: "1",
		IdempotencyKey: key, Args: []byte(`{}`), Fingerprint: "v1:" + key, State: "READY", PreparedBy: "pr_a",
		ApprovalTTL: time.Minute, DownstreamKey: "opk_" + id, Actor: "test"}
	if invoice != "" {
		n.Identity, n.TakeIdentity, n.IdentityWindow = invoice, true, window
	}
	return n
}

// reserving is n with the share r, which its insert reserves itself
// (OperationInsertReserving).
func reserving(n store.NewOperation, r store.Reservation) store.NewOperation {
	n.Reserve = &r
	n.BudgetNames, n.BudgetScopes = []string{r.Name}, []string{r.Scope}
	return n
}

// TestInsertTakesIdentity: an insert with TakeIdentity takes a free
// business identity with the operation, inserts nothing while another key's
// operation holds it, and, when its own key turns out taken, leaves the
// identity as it found it (the statement undone, read as "not inserted").
func TestInsertTakesIdentity(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	insert := func(id, key string) bool {
		_, inserted, err := g.st.OperationInsert(ctx, payOp(id, key, "INV-1", time.Hour))
		require.NoError(t, err)
		return inserted
	}
	holder := func() (string, string, bool) {
		h, k, held, err := g.st.IdentityGet(ctx, "acme", "pay", "INV-1")
		require.NoError(t, err)
		return h, k, held
	}
	require.True(t, insert("op_1", "k1"))
	h, k, held := holder()
	require.Equal(t, []any{"op_1", "k1", true}, []any{h, k, held})

	require.False(t, insert("op_2", "k2"), "another key while op_1 is live")
	_, err := g.st.OperationGet(ctx, "acme", "op_2")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing stored")
	require.False(t, insert("op_3", "k1"), "op_1's own key: its replay")
	h, _, _ = holder()
	require.Equal(t, "op_1", h, "a replay leaves the identity with its operation")

	// op_1 ends without effect: the identity is free, but key k1 is still
	// op_1's. Taking the identity for op_4 under k1 would leave it held by
	// an operation that does not exist.
	_, err = g.pool.Exec(ctx, `UPDATE operation SET state = 'FAILED' WHERE id = 'op_1'`)
	require.NoError(t, err)
	_, _, held = holder()
	require.False(t, held)
	require.False(t, insert("op_4", "k1"), "the key is taken")
	h, _, held = holder()
	require.Equal(t, []any{"op_1", false}, []any{h, held}, "the identity as the failure left it")
	require.True(t, insert("op_5", "k5"), "a new key after a failure")
	h, _, held = holder()
	require.Equal(t, []any{"op_5", true}, []any{h, held})
}

// TestBudgetFirstShare: a budget's first share (no row yet: a customer's
// first call in a window) is judged and counted by the row's insert, one
// row version and exact (migration 0019), and a first share that does not
// fit an empty budget is refused, or forced with `over: approve`.
func TestBudgetFirstShare(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	one := store.Reservation{Tenant: "acme", Name: "per_customer", Scope: "cust-1", MaxCount: 1, HasSum: true, MaxSum: 100,
		Window: time.Hour, MaxUses: 100}
	reserve := func(op string, amount float64, force bool) store.Reserved {
		r := one
		r.OperationID, r.Amount, r.Force = op, amount, force
		res, err := g.st.BudgetReserve(ctx, []store.Reservation{r}, true, false)
		require.NoError(t, err)
		return res
	}

	// In a transaction of its own, to count what it wrote.
	tx, err := g.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var out []int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT budget_reserve('acme', 'op_1', '{per_customer}', '{cust-0}', '{60}', '{1}', '{t}', '{100}',
		'{3600}', '{f}', 100, false, false)`).Scan(&out))
	require.Equal(t, []int32{-1, -1}, out, "the first share fits")
	var ins, upd int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'budget'`).Scan(&ins, &upd))
	require.Equal(t, []int64{1, 0}, []int64{ins, upd}, "a first share is one insert of the budget's row, not an insert and an update")
	require.NoError(t, tx.Commit(ctx))
	g.requireBudgetsExact(t)

	require.Equal(t, store.Reserved{Refused: 0, Over: -1}, reserve("op_2", 150, false), "150 does not fit an empty budget of 100")
	require.Equal(t, store.Reserved{Refused: -1, Over: -1}, reserve("op_3", 100, false), "100 fits it exactly")
	require.Equal(t, store.Reserved{Refused: 0, Over: -1}, reserve("op_4", 1, false), "a count of 1 is used")
	g.requireBudgetsExact(t)

	one.Scope = "cust-2"
	require.Equal(t, store.Reserved{Refused: -1, Over: 0}, reserve("op_5", 150, true), "over: approve takes it past the limit")
	uses, _, err := g.st.BudgetGet(ctx, "acme", "per_customer", "cust-2", time.Hour)
	require.NoError(t, err)
	require.Len(t, uses, 1)
	require.Equal(t, 150.0, uses[0].Amount)
	g.requireBudgetsExact(t)
}

// TestInsertReserving: an insert that reserves its share itself
// (OperationInsertReserving) stores the operation with its share and its
// identity, or nothing: a share that does not fit as its budget stands
// (ErrSharesDoNotFit), a key already taken and an identity another key
// holds (not inserted) leave the budget, its uses and the identity as they
// were. Its first try is stricter than the limit, never looser: a use that
// left the window but is still counted refuses it, and budget_reserve,
// which drops such uses, then admits the share exactly.
func TestInsertReserving(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	b := store.Reservation{Tenant: "acme", Name: "b", Scope: "cust-1", MaxCount: 2, HasSum: true, MaxSum: 100, Window: time.Hour, MaxUses: 100}
	insert := func(id, key, invoice string, amount float64, r store.Reservation) (bool, error) {
		r.OperationID = id
		if r.HasSum {
			r.Amount = amount
		}
		n := reserving(payOp(id, key, invoice, time.Hour), r)
		op, inserted, err := g.st.OperationInsert(ctx, n)
		if inserted {
			require.Equal(t, n.BudgetNames, op.BudgetNames)
			stored, err := g.st.OperationGet(ctx, "acme", id)
			require.NoError(t, err)
			require.Equal(t, []any{[]string{r.Name}, []string{r.Scope}}, []any{stored.BudgetNames, stored.BudgetScopes}, "the row names its budget")
		}
		return inserted, err
	}
	counts := func() (int, int, float64) {
		var ops, uses int
		var sum float64
		require.NoError(t, g.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM operation), (SELECT count(*) FROM budget_use),
			(SELECT coalesce(sum(used_sum), 0) FROM budget WHERE name = 'b')`).Scan(&ops, &uses, &sum))
		return ops, uses, sum
	}
	stored, err := insert("op_1", "k1", "INV-1", 70, b)
	require.NoError(t, err)
	require.True(t, stored)
	g.requireBudgetsExact(t)
	ops, uses, sum := counts()
	require.Equal(t, []any{1, 1, 70.0}, []any{ops, uses, sum}, "the operation and its share")
	holder, _, held, err := g.st.IdentityGet(ctx, "acme", "pay", "INV-1")
	require.NoError(t, err)
	require.Equal(t, []any{"op_1", true}, []any{holder, held})

	_, err = insert("op_2", "k2", "INV-2", 40, b)
	require.ErrorIs(t, err, store.ErrSharesDoNotFit, "b has 30 left")
	stored, err = insert("op_3", "k1", "INV-3", 10, b)
	require.NoError(t, err)
	require.False(t, stored, "k1 is op_1's key")
	stored, err = insert("op_4", "k4", "INV-1", 10, b)
	require.NoError(t, err)
	require.False(t, stored, "INV-1 is op_1's identity")
	ops, uses, sum = counts()
	require.Equal(t, []any{1, 1, 70.0}, []any{ops, uses, sum}, "nothing of op_2, op_3 or op_4 was stored or counted")
	g.requireBudgetsExact(t)
	_, holderKey, _, err := g.st.IdentityGet(ctx, "acme", "pay", "INV-3")
	require.NoError(t, err)
	require.Empty(t, holderKey, "op_3's identity was not taken")

	stored, err = insert("op_5", "k5", "INV-5", 30, b)
	require.NoError(t, err)
	require.True(t, stored, "exactly the room left")
	_, err = insert("op_6", "k6", "", 0, b)
	require.ErrorIs(t, err, store.ErrSharesDoNotFit, "a count of 2 is used")
	one := store.Reservation{Tenant: "acme", Name: "b", Scope: "cust-2", MaxCount: 0, HasSum: true, MaxSum: 10, Window: time.Hour, MaxUses: 100}
	_, err = insert("op_7", "k7", "", 11, one)
	require.ErrorIs(t, err, store.ErrSharesDoNotFit, "11 does not fit an empty budget of 10")
	stored, err = insert("op_7", "k7", "", 10, one)
	require.NoError(t, err)
	require.True(t, stored, "10 fits it exactly")
	g.requireBudgetsExact(t)

	// A use that left the window is still counted on its budget's row.
	brief := store.Reservation{Tenant: "acme", Name: "brief", Scope: "cust-1", MaxCount: 1, Window: 50 * time.Millisecond, MaxUses: 100}
	stored, err = insert("op_8", "k8", "", 0, brief)
	require.NoError(t, err)
	require.True(t, stored)
	var gone bool
	require.Eventually(t, func() bool {
		require.NoError(t, g.pool.QueryRow(ctx, `SELECT bool_and(at <= statement_timestamp() - interval '50 milliseconds')
			FROM budget_use WHERE name = 'brief'`).Scan(&gone))
		return gone
	}, 10*time.Second, 10*time.Millisecond)
	_, err = insert("op_9", "k9", "", 0, brief)
	require.ErrorIs(t, err, store.ErrSharesDoNotFit, "stricter than the limit while op_8's use is counted")
	brief.OperationID = "op_9"
	res, err := g.st.BudgetReserve(ctx, []store.Reservation{brief}, false, false)
	require.NoError(t, err)
	require.Equal(t, store.Reserved{Refused: -1, Over: -1}, res, "exact: op_8's use left the window")
	g.requireBudgetsExact(t)
}

// TestInsertReservingLockOrder: an insert that reserves takes its budgets'
// locks before its identity's, the order of the trigger that releases an
// operation's shares and identity when it ends: a transaction holding a
// budget that then takes the identity does not deadlock with an insert
// waiting for that budget. (Taking the identity first, the insert would
// hold it while waiting for the budget, and PostgreSQL would abort one of
// the two as a deadlock.)
func TestInsertReservingLockOrder(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	share := store.Reservation{Tenant: "acme", Name: "a", Scope: "cust-1", MaxCount: 5, Window: time.Hour, MaxUses: 100}
	insert := func(id, key string) (bool, error) {
		r := share
		r.OperationID = id
		_, inserted, err := g.st.OperationInsert(ctx, reserving(payOp(id, key, "INV-1", time.Hour), r))
		return inserted, err
	}
	stored, err := insert("op_1", "k1")
	require.NoError(t, err)
	require.True(t, stored)

	// As the trigger ending op_1 does: the budget, then the identity.
	tx, err := g.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM budget WHERE tenant = 'acme' AND name = 'a' AND scope = 'cust-1' FOR UPDATE`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := insert("op_2", "k2")
		done <- err
	}()
	g.waitForLock(t, "OperationInsertReserving", "op_2's insert waits for the budget")
	_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE operation_identity SET free_at = '-infinity' WHERE tenant = 'acme' AND identity = 'INV-1'`)
	require.NoError(t, err, "the identity is not held by the waiting insert")
	_, err = tx.Exec(ctx, `UPDATE operation SET state = 'FAILED' WHERE id = 'op_1'`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done, "op_2 takes the budget and the identity once they are released")
	holder, _, held, err := g.st.IdentityGet(ctx, "acme", "pay", "INV-1")
	require.NoError(t, err)
	require.Equal(t, []any{"op_2", true}, []any{holder, held})
}

// TestIdentityWindowFromTheOperation: an identity whose operation took
// effect is held for its window counted from the operation's success, read
// from the operation (migration 0022; the statement recording the success
// no longer writes it): refused to another key within the window, free
// after it. An operation pruned before its window ends has the window's
// end written on its identity by the prune, which stays held until then;
// one pruned after it leaves its identity free, and pruned in turn.
func TestIdentityWindowFromTheOperation(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	insert := func(id, key, invoice string, window time.Duration) bool {
		_, inserted, err := g.st.OperationInsert(ctx, payOp(id, key, invoice, window))
		require.NoError(t, err)
		return inserted
	}
	held := func(invoice string) bool {
		_, _, h, err := g.st.IdentityGet(ctx, "acme", "pay", invoice)
		require.NoError(t, err)
		return h
	}
	// succeeded marks an operation SUCCEEDED, ago before now.
	succeeded := func(id string, ago time.Duration) {
		_, err := g.pool.Exec(ctx, `UPDATE operation SET state = 'SUCCEEDED',
			updated_at = statement_timestamp() - make_interval(secs => $2) WHERE id = $1`, id, ago.Seconds())
		require.NoError(t, err)
	}

	require.True(t, insert("op_1", "k1", "INV-1", time.Hour))
	succeeded("op_1", 50*time.Minute)
	require.True(t, held("INV-1"))
	require.False(t, insert("op_2", "k2", "INV-1", time.Hour), "within the hour from op_1's success")
	succeeded("op_1", 61*time.Minute)
	require.False(t, held("INV-1"))
	require.True(t, insert("op_3", "k3", "INV-1", time.Hour), "after it")

	// Retention of one hour: op_4 took effect two hours ago with a window
	// of three, op_6 four hours ago; op_1 is pruned too, and its identity,
	// op_3's now, is left alone.
	require.True(t, insert("op_4", "k4", "INV-4", 3*time.Hour))
	succeeded("op_4", 2*time.Hour)
	require.True(t, insert("op_6", "k6", "INV-6", 3*time.Hour))
	succeeded("op_6", 4*time.Hour)
	n, err := g.st.OperationPrune(ctx, time.Hour, 100)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	holder, _, _, err := g.st.IdentityGet(ctx, "acme", "pay", "INV-1")
	require.NoError(t, err)
	require.Equal(t, "op_3", holder)
	require.True(t, held("INV-1"))
	require.True(t, held("INV-4"), "an hour of its window left after its operation was pruned")
	require.False(t, insert("op_5", "k5", "INV-4", time.Hour))
	require.False(t, held("INV-6"), "its window ended an hour ago")
	pruned, err := g.st.IdentityPrune(ctx, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, pruned, "INV-6's row")
	require.True(t, insert("op_7", "k7", "INV-6", time.Hour))
}

// TestPruneLocksIdentitiesFirst: the prune locks the identities of the
// operations it deletes before it deletes them. A Prepare that holds such an
// identity (a replay of the key at the retention's age: its statement locks
// the identity, then inserts under the key) meets the operation still there
// and finishes at once; the prune then deletes it and writes the identity's
// end. (Deleting first, the prune would wait for the identity while the
// Prepare waited for the deletion, and PostgreSQL would undo one of them as
// a deadlock.)
func TestPruneLocksIdentitiesFirst(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	_, inserted, err := g.st.OperationInsert(ctx, payOp("op_1", "k1", "INV-1", 3*time.Hour))
	require.NoError(t, err)
	require.True(t, inserted)
	_, err = g.pool.Exec(ctx, `UPDATE operation SET state = 'SUCCEEDED', updated_at = statement_timestamp() - interval '2 hours' WHERE id = 'op_1'`)
	require.NoError(t, err)

	// The replay's statement, in two steps: the identity locked...
	tx, err := g.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM operation_identity WHERE identity = 'INV-1' FOR UPDATE`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := g.st.OperationPrune(ctx, time.Hour, 100)
		done <- err
	}()
	g.waitForLock(t, "OperationPrune", "the prune waits for the identity")
	// ...then the insert under the key, which finds op_1 still there.
	_, err = tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`)
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, `INSERT INTO operation (id, tenant, tool, tool_version, idempotency_key, args, fingerprint, state,
			prepared_by, approval_required, downstream_key)
		VALUES ('op_2', 'acme', 'pay', '1', 'k1', '{}', 'v1:k1', 'READY', 'pr_a', false, 'opk_op_2') ON CONFLICT DO NOTHING`)
	require.NoError(t, err, "the key's operation is not being deleted yet")
	require.Zero(t, tag.RowsAffected())
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)
	_, err = g.st.OperationGet(ctx, "acme", "op_1")
	require.ErrorIs(t, err, store.ErrNotFound, "pruned")
	var left time.Duration
	require.NoError(t, g.pool.QueryRow(ctx, `SELECT (extract(epoch FROM free_at - statement_timestamp()) * 1e9)::bigint
		FROM operation_identity WHERE identity = 'INV-1'`).Scan(&left))
	require.InDelta(t, time.Hour.Seconds(), left.Seconds(), 60, "held for the rest of its window")
}

// TestBudgetReserveEach: the shares of several operations in one budget,
// reserved by one statement (budget_reserve_each), are judged in turn,
// each on what the ones before it left: a count admits as many as it has
// room for, a sum is exact (a smaller share after a refused one is taken),
// `over: approve` takes the rest past the limit, uses that left the window
// are dropped when the batch does not fit otherwise, an operation that
// holds a share already keeps it without failing the others, and the
// budget's count and sum stay those of its uses.
func TestBudgetReserveEach(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	n := 0
	each := func(r store.Reservation, amounts ...float64) []store.Share {
		t.Helper()
		var rs []store.Reservation
		for _, a := range amounts {
			n++
			x := r
			x.OperationID, x.Amount = fmt.Sprintf("op_e%d", n), a
			rs = append(rs, x)
		}
		out, err := g.st.BudgetReserveEach(ctx, rs)
		require.NoError(t, err)
		g.requireBudgetsExact(t)
		return out
	}
	const no, yes, over = store.ShareRefused, store.ShareTaken, store.ShareOver

	count := store.Reservation{Tenant: "acme", Name: "three", MaxCount: 3, Window: time.Hour, MaxUses: 100}
	require.Equal(t, []store.Share{yes, yes, yes, no, no}, each(count, 0, 0, 0, 0, 0), "room for three")
	require.Equal(t, []store.Share{no}, each(count, 0), "and no more")

	sum := store.Reservation{Tenant: "acme", Name: "hundred", HasSum: true, MaxSum: 100, Window: time.Hour, MaxUses: 100}
	require.Equal(t, []store.Share{yes, no, yes, no, yes}, each(sum, 60, 50, 30, 11, 10), "exact: 60 + 30 + 10")

	forced := store.Reservation{Tenant: "acme", Name: "one", Scope: "cust-1", MaxCount: 1, Window: time.Hour, MaxUses: 3, Force: true}
	require.Equal(t, []store.Share{yes, over, over, no}, each(forced, 0, 0, 0, 0), "forced past the count, within MaxUses")

	// Uses that left the window are dropped when the batch does not fit
	// with them counted, and only then.
	brief := store.Reservation{Tenant: "acme", Name: "two", MaxCount: 2, Window: time.Hour, MaxUses: 100}
	require.Equal(t, []store.Share{yes}, each(brief, 0))
	_, err := g.pool.Exec(ctx, `UPDATE budget_use SET at = at - interval '2 hours' WHERE name = 'two'`)
	require.NoError(t, err)
	require.Equal(t, []store.Share{yes}, each(brief, 0), "fits with the expired use still counted")
	require.Equal(t, []store.Share{yes, no}, each(brief, 0, 0), "the expired use dropped: room for one more")
	var left int
	require.NoError(t, g.pool.QueryRow(ctx, `SELECT count(*) FROM budget_use WHERE name = 'two'`).Scan(&left))
	require.Equal(t, 2, left)

	// An operation that holds a share already keeps it, counted once, and
	// the other shares of its statement are stored.
	again := store.Reservation{Tenant: "acme", Name: "again", MaxCount: 5, Window: time.Hour, MaxUses: 100}
	require.Equal(t, []store.Share{yes}, each(again, 0))
	n-- // the next share is op_e<n> again
	require.Equal(t, []store.Share{yes, yes}, each(again, 0, 0), "the holder answered taken, the next one stored")
	var uses, used int
	require.NoError(t, g.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM budget_use WHERE name = 'again'),
		(SELECT used_count FROM budget WHERE name = 'again')`).Scan(&uses, &used))
	require.Equal(t, []int{2, 2}, []int{uses, used})

	_, err = g.st.BudgetReserveEach(ctx, []store.Reservation{
		{Tenant: "acme", Name: "a", OperationID: "op_x", MaxCount: 1, Window: time.Hour, MaxUses: 100},
		{Tenant: "acme", Name: "b", OperationID: "op_y", MaxCount: 1, Window: time.Hour, MaxUses: 100}})
	require.ErrorContains(t, err, "more than one budget", "one budget a statement")
}
