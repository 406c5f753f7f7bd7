package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/store"
)

var allStates = []string{"AWAITING_APPROVAL", "READY", "EXECUTING", "SUCCEEDED", "FAILED", "OUTCOME_UNKNOWN", "REJECTED", "CANCELLED"}

// seedOperations inserts n operations for tenant in one statement: one in
// fifty awaits approval, the rest succeeded; tools alternate; creation
// times step back one second every three operations, so ties on
// created_at are common and the id must break them.
func seedOperations(t *testing.T, st *store.Store, tenant string, n int) {
	t.Helper()
	require.NoError(t, st.Exec(t.Context(), `
INSERT INTO operation (id, tenant, tool, tool_version, idempotency_key, args, fingerprint, state, prepared_by,
                       approval_required, downstream_key, created_at)
SELECT 'op_' || $1 || lpad(i::text, 8, '0'), $1, CASE WHEN i % 2 = 0 THEN 'pay_invoice' ELSE 'send_email' END, '1',
       'k' || i, '{}', 'v1:x', CASE WHEN i % 50 = 0 THEN 'AWAITING_APPROVAL' ELSE 'SUCCEEDED' END, 'pr_x',
       true, 'dk_' || $1 || i, now() - make_interval(secs => i / 3)
FROM generate_series(1, $2) AS i`, tenant, n))
}

func listAll(t *testing.T, st *store.Store, q store.ListQuery) []store.Operation {
	t.Helper()
	var out []store.Operation
	for {
		page, err := st.OperationList(t.Context(), q)
		require.NoError(t, err)
		out = append(out, page...)
		if len(page) < int(q.Limit) {
			return out
		}
		last := page[len(page)-1]
		q.AfterTime, q.AfterID = last.CreatedAt, last.ID
	}
}

// TestOperationListPagesInOrder pages through a tenant with small pages and
// gets every operation exactly once, newest first, ties broken by id, and
// nothing of the other tenant.
func TestOperationListPagesInOrder(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	_, err := store.Migrate(t.Context(), url)
	require.NoError(t, err)
	st, err := store.Open(t.Context(), store.Config{URL: url, MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	seedOperations(t, st, "acme", 300)
	seedOperations(t, st, "other", 100)

	got := listAll(t, st, store.ListQuery{Tenant: "acme", States: allStates, Limit: 7})
	require.Len(t, got, 300)
	ids := map[string]bool{}
	for i, op := range got {
		require.Equal(t, "acme", op.Tenant)
		require.False(t, ids[op.ID], "%s listed twice", op.ID)
		ids[op.ID] = true
		if i > 0 {
			prev := got[i-1]
			require.True(t, prev.CreatedAt.After(op.CreatedAt) || prev.CreatedAt.Equal(op.CreatedAt) && prev.ID > op.ID,
				"%s (%s) listed before %s (%s)", prev.ID, prev.CreatedAt, op.ID, op.CreatedAt)
		}
	}

	pending := listAll(t, st, store.ListQuery{Tenant: "acme", States: []string{"AWAITING_APPROVAL"}, Limit: 4})
	require.Len(t, pending, 6)
	for _, op := range pending {
		require.Equal(t, "AWAITING_APPROVAL", op.State)
	}
	emails := listAll(t, st, store.ListQuery{Tenant: "acme", States: allStates, Tool: "send_email", Limit: 50})
	require.Len(t, emails, 150)
	require.True(t, slices.ContainsFunc(emails, func(op store.Operation) bool { return op.Tool == "send_email" }))
	require.False(t, slices.ContainsFunc(emails, func(op store.Operation) bool { return op.Tool != "send_email" }))
}

// TestOperationListUsesTheIndex shows the plan PostgreSQL runs a page with,
// on a table of 40,000 operations: each state is an index scan of
// operation_list that stops after a page, with the tenant, state and cursor
// as index conditions; nothing scans the table.
func TestOperationListUsesTheIndex(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	_, err := store.Migrate(t.Context(), url)
	require.NoError(t, err)
	st, err := store.Open(t.Context(), store.Config{URL: url, MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	for i := range 4 {
		seedOperations(t, st, fmt.Sprintf("tenant%d", i), 10000)
	}
	require.NoError(t, st.Exec(t.Context(), "ANALYZE operation"))

	for _, q := range []store.ListQuery{
		{Tenant: "tenant1", States: []string{"AWAITING_APPROVAL"}, Limit: 51},
		{Tenant: "tenant1", States: allStates, Limit: 51},
		{Tenant: "tenant1", States: allStates, Tool: "pay_invoice", Limit: 51},
		{Tenant: "tenant2", States: []string{"SUCCEEDED", "AWAITING_APPROVAL"}, Limit: 51,
			AfterTime: time2(t, st), AfterID: "op_tenant200005000"},
	} {
		plan, err := st.ExplainOperationList(context.Background(), q)
		require.NoError(t, err)
		t.Logf("states %v tool %q after %q:\n%s", q.States, q.Tool, q.AfterID, plan)
		require.Contains(t, plan, "Index Scan Backward using operation_list on operation")
		require.Contains(t, plan, "Index Cond: ((tenant = ")
		require.NotContains(t, plan, "Seq Scan on operation")
		require.NotContains(t, plan, "Bitmap Heap Scan on operation")
	}

	// The console's approvals not executed yet: their own partial index,
	// never a scan of every READY operation, here 4,000 of a tool that
	// needs no approval, prepared and never executed, and 40 approvals.
	require.NoError(t, st.Exec(t.Context(), `UPDATE operation SET state = 'READY', approval_required = false
		WHERE tenant = 'tenant1' AND tool = 'send_email' AND id < 'op_tenant100008000'`))
	require.NoError(t, st.Exec(t.Context(), `UPDATE operation SET state = 'READY', approval_decision = 'APPROVE',
		approval_expires_at = now() + interval '1 hour' WHERE tenant = 'tenant1' AND state = 'AWAITING_APPROVAL' AND id < 'op_tenant100002000'`))
	require.NoError(t, st.Exec(t.Context(), "ANALYZE operation"))
	plan, err := st.ExplainOperationList(context.Background(), store.ListQuery{Tenant: "tenant1", ApprovedUnsent: true, Limit: 51})
	require.NoError(t, err)
	t.Logf("approved, unsent:\n%s", plan)
	require.Contains(t, plan, "using operation_approved_unsent on operation")
	require.NotContains(t, plan, "Seq Scan on operation")
}

// time2 is the creation time of the cursor operation of the last case.
func time2(t *testing.T, st *store.Store) time.Time {
	t.Helper()
	op, err := st.OperationGet(t.Context(), "tenant2", "op_tenant200005000")
	require.NoError(t, err)
	return op.CreatedAt
}
