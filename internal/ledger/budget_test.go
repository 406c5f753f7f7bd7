package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// budgetTools declares a charge tool whose invoice is its business
// identity, a refund tool counted by limitsYAML, and an approval-required
// payout for the release tests.
func budgetTools(limitsYAML string) []byte {
	refundApproval := ""
	if strings.Contains(limitsYAML, "over: approve") {
		refundApproval = "    approval: {ttl: 15m}\n"
	}
	return []byte(`tools:
  - name: pay
    version: "1"
    effect: side_effect
    identity: {key: args.invoice_id, window: 720h}
    args_schema:
      type: object
      properties:
        invoice_id: {type: string}
        amount_minor: {type: integer}
        currency: {type: string}
      required: [invoice_id, amount_minor, currency]
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/charges
      dedupes_keys: true
      lookup_url: ${OPLEDGER_FAKEPAY_URL}/charges?idempotency_key={key}
      lookup_consistent: true
      external_ref_field: id
  - name: refund
    version: "1"
    effect: side_effect
` + refundApproval + `    args_schema:
      type: object
      properties:
        invoice_id: {type: string}
        customer_id: {type: string}
        amount_minor: {type: integer}
        currency: {type: string}
      required: [invoice_id, customer_id, amount_minor, currency]
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/charges
      dedupes_keys: true
      lookup_url: ${OPLEDGER_FAKEPAY_URL}/charges?idempotency_key={key}
      lookup_consistent: true
      external_ref_field: id
  - name: payout
    version: "1"
    effect: side_effect
    approval: {required: true, ttl: 15m}
    args_schema:
      type: object
      properties:
        invoice_id: {type: string}
        customer_id: {type: string}
        amount_minor: {type: integer}
        currency: {type: string}
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/charges
      dedupes_keys: true
      external_ref_field: id
limits:
` + limitsYAML)
}

func refundFor(t *testing.T, customer string, amount int) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{"invoice_id": harness.Unique("INV"), "customer_id": customer,
		"amount_minor": float64(amount), "currency": "EUR"})
	require.NoError(t, err)
	return s
}

func oneCall(c opledgerv1.LedgerServiceClient, key, tool string, args *structpb.Struct) (*opledgerv1.PrepareResponse, error) {
	return c.Prepare(harness.Ctx(key, harness.Unique("idem")), &opledgerv1.PrepareRequest{Tool: tool, Args: args, Execute: true})
}

func retryInfo(t *testing.T, err error) *errdetails.RetryInfo {
	t.Helper()
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			return r
		}
	}
	return nil
}

// limitPaths runs f with limitsYAML as it is (limits without a `per` key:
// each Prepare reserves its shares in a statement of its own) and with
// the limit per principal (`per: principal.id`: every call of the test's
// agent on one budget, whose share the insert reserves itself, the tests
// giving it one limit), the two ways a reservation is made (docs/policy.md,
// "How a reservation is made").
func limitPaths(t *testing.T, limitsYAML string, f func(t *testing.T, limitsYAML string)) {
	for _, p := range []struct{ name, per string }{{"tenant-wide", ""}, {"per key", "per: principal.id, "}} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			f(t, strings.ReplaceAll(limitsYAML, "window:", p.per+"window:"))
		})
	}
}

// threeReplicas starts three servers on one database.
func threeReplicas(w *world) []opledgerv1.LedgerServiceClient {
	return threeReplicasWith(w, harness.ServerOptions{})
}

// threeReplicasWith starts three servers on one database with opts.
func threeReplicasWith(w *world, opts harness.ServerOptions) []opledgerv1.LedgerServiceClient {
	var out []opledgerv1.LedgerServiceClient
	for range 3 {
		out = append(out, w.env.StartServer(opts).Client)
	}
	return out
}

// admissions counts, through the ledger's statements, how the shares of
// the operations stored were reserved: by the insert itself
// (OperationInsertReserving), or apart, by a BudgetReserve that admitted
// them.
type admissions struct{ inInsert, apart, statements atomic.Int64 }

func (a *admissions) hooks() *ledger.Hooks {
	return &ledger.Hooks{Statements: func(s ledger.Statements) ledger.Statements { return countingStatements{s, a} }}
}

type countingStatements struct {
	ledger.Statements
	a *admissions
}

func (c countingStatements) OperationInsert(ctx context.Context, conn *store.Conn, n store.NewOperation) (ledger.Operation, bool, error) {
	op, inserted, err := c.Statements.OperationInsert(ctx, conn, n)
	if err == nil && inserted && n.Reserve != nil {
		c.a.inInsert.Add(1)
	}
	return op, inserted, err
}

func (c countingStatements) BudgetReserve(ctx context.Context, conn *store.Conn, limits []*tool.Limit, rs []store.Reservation, async bool) (store.Reserved, error) {
	res, err := c.Statements.BudgetReserve(ctx, conn, limits, rs, async)
	if err == nil && res.Refused < 0 {
		c.a.apart.Add(1)
	}
	return res, err
}

func (c countingStatements) BudgetReserveEach(ctx context.Context, conn *store.Conn, lim *tool.Limit, rs []store.Reservation) ([]store.Share, error) {
	out, err := c.Statements.BudgetReserveEach(ctx, conn, lim, rs)
	c.a.statements.Add(1)
	for _, s := range out {
		if s != store.ShareRefused {
			c.a.apart.Add(1)
		}
	}
	return out, err
}

// heldStatements holds the first BudgetReserveEach until release is closed
// and the second until second is, and records the operations each one
// carried when it is sent, and how many have returned.
type heldStatements struct {
	ledger.Statements
	entered, release, second chan struct{}
	mu                       sync.Mutex
	batches                  [][]string
	returned                 int
}

func (h *heldStatements) BudgetReserveEach(ctx context.Context, conn *store.Conn, lim *tool.Limit, rs []store.Reservation) ([]store.Share, error) {
	h.mu.Lock()
	first := len(h.batches) == 0
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.OperationID)
	}
	h.batches = append(h.batches, ids)
	n := len(h.batches)
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.release
	}
	if n == 2 {
		<-h.second
	}
	out, err := h.Statements.BudgetReserveEach(ctx, conn, lim, rs)
	h.mu.Lock()
	h.returned++
	h.mu.Unlock()
	return out, err
}

// done is how many statements have returned.
func (h *heldStatements) done() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.returned
}

func (h *heldStatements) sent() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.batches)
}

// TestShareOfAPrepareGoneWhileQueuedIsReleased: a Prepare whose deadline
// passes while its share waits for the statement of its budget's batch
// learns that the statement took the share, and gives it back, its
// operation never stored: the limit has room for the next call, as if the
// Prepare had never come.
func TestShareOfAPrepareGoneWhileQueuedIsReleased(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: budgetTools(`  - {name: two_per_hour, tools: [refund], window: 1h, count: 2}
`)})
	held := &heldStatements{entered: make(chan struct{}), release: make(chan struct{}), second: make(chan struct{})}
	c := w.env.StartServer(harness.ServerOptions{Hooks: &ledger.Hooks{Statements: func(s ledger.Statements) ledger.Statements {
		held.Statements = s
		return held
	}}}).Client
	// A test that fails while a statement is held lets it go before the
	// server stops (cleanups run last first).
	releaseFirst, releaseSecond := sync.OnceFunc(func() { close(held.release) }), sync.OnceFunc(func() { close(held.second) })
	t.Cleanup(func() { releaseFirst(); releaseSecond() })
	first := make(chan error, 1)
	go func() {
		_, err := oneCall(c, w.agent, "refund", refundFor(t, "c-1", 100))
		first <- err
	}()
	<-held.entered
	// The second Prepare's share waits behind the first one's statement
	// until its deadline has passed. (A one-call Prepare's insert runs to
	// its end whatever its caller does, once it started: its share is its
	// operation's.)
	ctx, cancel := context.WithTimeout(harness.Ctx(w.agent, harness.Unique("idem")), 500*time.Millisecond)
	defer cancel()
	_, err := c.Prepare(ctx, &opledgerv1.PrepareRequest{Tool: "refund", Args: refundFor(t, "c-1", 100)})
	require.Equal(t, codes.DeadlineExceeded, status.Code(err))
	releaseFirst()
	require.NoError(t, <-first)
	// Its share was taken by the next statement, then given back. While
	// that statement has not run, the budget shows the first operation's
	// use alone, though nothing was given back yet: a wait for one use
	// proves the release only once the statement returned. (The read below
	// holds by the test's own gate; it shows why the wait after it is on
	// the statement's return.)
	require.Eventually(t, func() bool { return len(held.sent()) == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Len(t, held.sent()[1], 1, "the second Prepare's share, sent after the first statement")
	uses, _, err := w.env.Store.BudgetGet(t.Context(), "acme", "two_per_hour", "", time.Hour)
	require.NoError(t, err)
	require.Len(t, uses, 1, "the share not taken yet")
	releaseSecond()
	require.Eventually(t, func() bool { return held.done() == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		uses, _, err := w.env.Store.BudgetGet(t.Context(), "acme", "two_per_hour", "", time.Hour)
		require.NoError(t, err)
		return len(uses) == 1
	}, 10*time.Second, 10*time.Millisecond, "released")
	_, err = oneCall(c, w.agent, "refund", refundFor(t, "c-1", 100))
	require.NoError(t, err, "room for a second operation")
	_, err = oneCall(c, w.agent, "refund", refundFor(t, "c-1", 100))
	requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
}

// TestLimitCountAcrossReplicas: 64 concurrent one-call Prepares on three
// replicas against `count: 10`: exactly 10 are sent, 54 refused with
// LIMIT_EXCEEDED and a RetryInfo, none INTERNAL.
func TestLimitCountAcrossReplicas(t *testing.T) {
	t.Parallel()
	limitPaths(t, `  - {name: ten_per_hour, tools: [refund], window: 1h, count: 10}
`, func(t *testing.T, limitsYAML string) {
		w := newWorld(t, harness.Options{ToolsYAML: budgetTools(limitsYAML)})
		var adm admissions
		cs := threeReplicasWith(w, harness.ServerOptions{Hooks: adm.hooks()})
		var mu sync.Mutex
		sent, refused := 0, 0
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := oneCall(cs[i%3], w.agent, "refund", refundFor(t, "c-1", 100))
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
					require.Equal(t, []string{"ten_per_hour"}, budgetNames(resp.GetOperation()))
					sent++
					return
				}
				requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
				info := errorInfo(t, err)
				require.Equal(t, "ten_per_hour", info.GetMetadata()["limit"])
				require.Equal(t, "1h0m0s", info.GetMetadata()["window"])
				ri := retryInfo(t, err)
				require.NotNil(t, ri, "when room frees up")
				require.Greater(t, ri.GetRetryDelay().AsDuration().Minutes(), 55.0)
				refused++
			}()
		}
		wg.Wait()
		require.Equal(t, 10, sent)
		require.Equal(t, 54, refused)
		require.Len(t, w.env.Fakepay.Charges(), 10)
		// The way the shares were reserved (docs/policy.md, "How a
		// reservation is made").
		if strings.Contains(limitsYAML, "per:") {
			require.Equal(t, []int64{10, 0}, []int64{adm.inInsert.Load(), adm.apart.Load()}, "reserved by the insert")
		} else {
			require.Equal(t, []int64{0, 10}, []int64{adm.inInsert.Load(), adm.apart.Load()}, "reserved apart")
			t.Logf("64 shares reserved apart in %d statements", adm.statements.Load())
		}
	})
}

// TestSeveralPerKeyLimitsReserveApart: a tool with one limit per key
// reserves its share in its insert; a tool with two reserves both in a
// statement of their own, all or none (docs/policy.md, "How a reservation
// is made"), and each limit holds exactly: the third call of a customer is
// refused by the limit of two and counted by neither limit, the first of
// another customer admitted.
func TestSeveralPerKeyLimitsReserveApart(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: budgetTools(`  - {name: a_two_per_customer, tools: [refund], per: args.customer_id, window: 1h, count: 2}
  - {name: b_five_per_customer, tools: [refund], per: args.customer_id, window: 1h, count: 5}
`)})
	var adm admissions
	c := w.env.StartServer(harness.ServerOptions{Hooks: adm.hooks()}).Client
	var last *opledgerv1.PrepareResponse
	for range 2 {
		resp, err := oneCall(c, w.agent, "refund", refundFor(t, "c-1", 100))
		require.NoError(t, err)
		require.Equal(t, []string{"a_two_per_customer", "b_five_per_customer"}, budgetNames(resp.GetOperation()))
		last = resp
	}
	_, err := oneCall(c, w.agent, "refund", refundFor(t, "c-1", 100))
	requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	require.Equal(t, "a_two_per_customer", errorInfo(t, err).GetMetadata()["limit"])
	got, err := c.Get(harness.Ctx(w.agent, ""), &opledgerv1.GetRequest{OperationId: last.GetOperation().GetId()})
	require.NoError(t, err)
	counts := map[string]int64{}
	for _, b := range got.GetOperation().GetBudgets() {
		counts[b.GetLimit()] = b.GetCount()
	}
	require.Equal(t, map[string]int64{"a_two_per_customer": 2, "b_five_per_customer": 2}, counts, "all or none: the refused call counts in neither")
	_, err = oneCall(c, w.agent, "refund", refundFor(t, "c-2", 100))
	require.NoError(t, err)
	require.Equal(t, []int64{0, 3}, []int64{adm.inInsert.Load(), adm.apart.Load()}, "reserved apart")
	require.Len(t, w.env.Fakepay.Charges(), 3)
}

func budgetNames(op *opledgerv1.Operation) []string {
	var out []string
	for _, b := range op.GetBudgets() {
		out = append(out, b.GetLimit())
	}
	return out
}

// TestLimitSumIsExact: concurrent random amounts against a sum limit: the
// admitted sum stays within max, and a further amount that fits is admitted
// (the limit is exact, not conservative).
func TestLimitSumIsExact(t *testing.T) {
	t.Parallel()
	limitPaths(t, `  - {name: daily_total, tools: [refund], window: 24h, sum: args.amount_minor, max: 100000}
`, func(t *testing.T, limitsYAML string) {
		w := newWorld(t, harness.Options{ToolsYAML: budgetTools(limitsYAML)})
		cs := threeReplicas(w)
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for i := range 48 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				amount := 1000 + rand.IntN(9000)
				_, err := oneCall(cs[i%3], w.agent, "refund", refundFor(t, "c-1", amount))
				if err != nil {
					requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
					return
				}
				mu.Lock()
				admitted += amount
				mu.Unlock()
			}()
		}
		wg.Wait()
		require.LessOrEqual(t, admitted, 100000)
		total := 0
		for _, c := range w.env.Fakepay.Charges() {
			total += int(c.AmountMinor)
		}
		require.Equal(t, admitted, total)
		room := 100000 - admitted
		if room > 0 {
			_, err := oneCall(cs[0], w.agent, "refund", refundFor(t, "c-1", room))
			require.NoError(t, err, "exactly the room left fits")
		}
		_, err := oneCall(cs[1], w.agent, "refund", refundFor(t, "c-1", 1))
		requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
		_, err = oneCall(cs[1], w.agent, "refund", refundFor(t, "c-1", 100001))
		requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
		require.Contains(t, err.Error(), "this call alone is more than that")
	})
}

// TestLimitPerKey: a `per` key gives each customer a budget of its own.
func TestLimitPerKey(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: budgetTools(`  - {name: two_per_customer, tools: [refund], per: args.customer_id, window: 1h, count: 2}
`)})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	for range 2 {
		_, err := oneCall(c, w.agent, "refund", refundFor(t, "ada", 100))
		require.NoError(t, err)
	}
	_, err := oneCall(c, w.agent, "refund", refundFor(t, "ada", 100))
	requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	require.Equal(t, "ada", errorInfo(t, err).GetMetadata()["scope"])
	_, err = oneCall(c, w.agent, "refund", refundFor(t, "grace", 100))
	require.NoError(t, err, "another customer's budget")
	// A replay of a counted operation is never refused by its limit.
	key := harness.Unique("idem")
	args := refundFor(t, "linus", 100)
	for range 2 {
		_, err := c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "refund", Args: args})
		require.NoError(t, err)
	}
	_, err = oneCall(c, w.agent, "refund", refundFor(t, "linus", 100))
	require.NoError(t, err)
	resp, err := c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "refund", Args: args})
	require.NoError(t, err, "the budget is full, and a replay is still a replay")
	require.True(t, resp.GetReplayed())
	got, _ := get(t, c, w.agent, resp.GetOperation().GetId())
	require.Len(t, got.GetBudgets(), 1)
	b := got.GetBudgets()[0]
	require.Equal(t, "two_per_customer", b.GetLimit())
	require.Equal(t, "linus", b.GetScope())
	require.EqualValues(t, 2, b.GetCount())
	require.EqualValues(t, 2, b.GetMaxCount())
}

// TestLimitReleases: an operation that ends without effect frees its share
// (denied, cancelled, failed, resolved as failed); one whose outcome is
// unknown keeps it.
func TestLimitReleases(t *testing.T) {
	t.Parallel()
	limitPaths(t, `  - {name: one_payout, tools: [payout], window: 1h, count: 1}
`, func(t *testing.T, limitsYAML string) {
		w := newWorld(t, harness.Options{ToolsYAML: budgetTools(limitsYAML)})
		c := w.env.StartServer(harness.ServerOptions{}).Client
		full := func() {
			t.Helper()
			_, err := c.Prepare(harness.Ctx(w.agent, harness.Unique("idem")), &opledgerv1.PrepareRequest{Tool: "payout", Args: refundFor(t, "c", 100)})
			requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
		}
		// Denied.
		op := prepare(t, c, w.agent, "payout", refundFor(t, "c", 100))
		full()
		_, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
		require.NoError(t, err)
		// Cancelled.
		op = prepare(t, c, w.agent, "payout", refundFor(t, "c", 100))
		full()
		_, err = c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: op.GetId()})
		require.NoError(t, err)
		// Failed: the processor refuses it definitively.
		bad := refundFor(t, "c", 100)
		bad.Fields["amount_minor"] = structpb.NewNumberValue(-5)
		op = prepare(t, c, w.agent, "payout", bad)
		full()
		approve(t, c, w.approver, op)
		resp, err := execute(c, w.agent, op.GetId(), 0)
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_FAILED, resp.GetOperation().GetState())
		// Succeeded: it stays counted.
		op = prepare(t, c, w.agent, "payout", refundFor(t, "c", 100))
		approve(t, c, w.approver, op)
		resp, err = execute(c, w.agent, op.GetId(), 0)
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
		full()
	})
}

// TestLimitOutcomeUnknownHoldsItsShare: an unknown outcome is spent until
// an operator proves nothing happened.
func TestLimitOutcomeUnknownHoldsItsShare(t *testing.T) {
	t.Parallel()
	limitPaths(t, `  - {name: one_mail, tools: [mail], window: 1h, count: 1}
`, func(t *testing.T, limitsYAML string) {
		w := newWorld(t, harness.Options{ToolsYAML: []byte(strings.Replace(string(budgetTools(limitsYAML)), "  - name: payout", `  - name: mail
    version: "1"
    effect: side_effect
    args_schema: {type: object}
    executor: {type: http, url: "${OPLEDGER_FAKEPAY_URL}/emails", timeout: 200ms}
  - name: payout`, 1))})
		c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
		w.env.Fakepay.SetFaults(fakepay.Faults{Delay: 2 * time.Second})
		resp, err := oneCall(c, w.agent, "mail", &structpb.Struct{})
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
		w.env.Fakepay.SetFaults(fakepay.Faults{})
		_, err = oneCall(c, w.agent, "mail", &structpb.Struct{})
		requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
		_, err = c.Reconcile(harness.Ctx(w.operator, ""), &opledgerv1.ReconcileRequest{OperationId: resp.GetOperation().GetId(),
			Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_FAILED, Note: "the mail service has no record of it",
				Fence: resp.GetOperation().GetFence()}})
		require.NoError(t, err)
		_, err = oneCall(c, w.agent, "mail", &structpb.Struct{})
		require.NoError(t, err, "released once proven not to have happened")
	})
}

// TestLimitOverApprove: past an `over: approve` limit the operation is
// recorded and needs an approval it would not otherwise need.
func TestLimitOverApprove(t *testing.T) {
	t.Parallel()
	limitPaths(t, `  - {name: big_day, tools: [refund], window: 24h, sum: args.amount_minor, max: 1000, over: approve}
`, func(t *testing.T, limitsYAML string) {
		w := newWorld(t, harness.Options{ToolsYAML: budgetTools(limitsYAML)})
		c := w.env.StartServer(harness.ServerOptions{}).Client
		resp, err := oneCall(c, w.agent, "refund", refundFor(t, "c", 800))
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
		resp, err = oneCall(c, w.agent, "refund", refundFor(t, "c", 800))
		require.NoError(t, err)
		op := resp.GetOperation()
		require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, op.GetState())
		require.Equal(t, "limits.big_day", op.GetApproval().GetRule())
		approve(t, c, w.approver, op)
		done, err := execute(c, w.agent, op.GetId(), 0)
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, done.GetOperation().GetState())
	})
}

// TestIdentityRace: 20 keys racing for one invoice make one operation; the
// others are told which, and nothing of theirs is stored.
func TestIdentityRace(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: budgetTools("")})
	cs := threeReplicas(w)
	args := payArgs(t, "INV-2048")
	var mu sync.Mutex
	var winners []string
	dups := map[string]int{}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := oneCall(cs[i%3], w.agent, "pay", args)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				winners = append(winners, resp.GetOperation().GetId())
				return
			}
			requireStatus(t, err, codes.AlreadyExists, "OPERATION_DUPLICATE")
			dups[errorInfo(t, err).GetMetadata()["operation_id"]]++
		}()
	}
	wg.Wait()
	require.Len(t, winners, 1)
	require.Equal(t, map[string]int{winners[0]: 19}, dups)
	require.Len(t, w.env.Fakepay.Charges(), 1)
	list, err := cs[0].ListOperations(harness.Ctx(w.approver, ""), &opledgerv1.ListOperationsRequest{Tool: "pay"})
	require.NoError(t, err)
	require.Len(t, list.GetOperations(), 1, "nothing of the refused Prepares was stored")
}

// TestIdentityFreedWithoutEffect: after FAILED, REJECTED or CANCELLED a new
// key may try the same invoice again; after SUCCEEDED it may not.
func TestIdentityFreedWithoutEffect(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: []byte(strings.Replace(string(budgetTools("")),
		"    approval: {required: true, ttl: 15m}\n", "    approval: {required: true, ttl: 15m}\n    identity: {key: args.invoice_id, window: 1h}\n", 1))})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	inv := refundFor(t, "c", 100)
	op := prepare(t, c, w.agent, "payout", inv)
	_, err := c.Prepare(harness.Ctx(w.agent, harness.Unique("idem")), &opledgerv1.PrepareRequest{Tool: "payout", Args: inv})
	requireStatus(t, err, codes.AlreadyExists, "OPERATION_DUPLICATE")
	require.Contains(t, err.Error(), op.GetId())
	_, err = decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
	require.NoError(t, err)
	op = prepare(t, c, w.agent, "payout", inv) // free after REJECTED
	_, err = c.Cancel(harness.Ctx(w.agent, ""), &opledgerv1.CancelRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	op = prepare(t, c, w.agent, "payout", inv) // free after CANCELLED
	approve(t, c, w.approver, op)
	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	_, err = c.Prepare(harness.Ctx(w.agent, harness.Unique("idem")), &opledgerv1.PrepareRequest{Tool: "payout", Args: inv})
	requireStatus(t, err, codes.AlreadyExists, "OPERATION_DUPLICATE")
	require.Contains(t, err.Error(), fmt.Sprintf("operation %s", op.GetId()))
}

// TestIdentityThatCannotBeEvaluated: a call whose identity expression fails
// (a missing field) is refused ARGS_INVALID naming the rule, nothing stored.
func TestIdentityThatCannotBeEvaluated(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: []byte(strings.Replace(string(budgetTools("")),
		"    approval: {required: true, ttl: 15m}\n", "    approval: {required: true, ttl: 15m}\n    identity: {key: args.invoice_id, window: 1h}\n", 1))})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	key := harness.Unique("idem")
	args, err := structpb.NewStruct(map[string]any{"customer_id": "c", "amount_minor": 100.0, "currency": "EUR"})
	require.NoError(t, err)
	_, err = c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "payout", Args: args})
	requireStatus(t, err, codes.InvalidArgument, "ARGS_INVALID")
	require.Equal(t, "identity.key", errorInfo(t, err).GetMetadata()["rule"])
	// Nothing was stored under the key.
	args.Fields["invoice_id"] = structpb.NewStringValue(harness.Unique("INV"))
	resp, err := c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "payout", Args: args})
	require.NoError(t, err)
	require.False(t, resp.GetReplayed())
}

// TestLimitLapsedApprovalReleases: an approval that lapsed before anything
// was sent releases the operation's share; renewing the approval takes it
// again, and is refused while the budget has no room.
func TestLimitLapsedApprovalReleases(t *testing.T) {
	t.Parallel()
	limitPaths(t, `  - {name: one_payout, tools: [payout], window: 1h, count: 1}
`, func(t *testing.T, limitsYAML string) {
		w := newWorld(t, harness.Options{ToolsYAML: []byte(strings.Replace(string(budgetTools(limitsYAML)), "    approval: {required: true, ttl: 15m}\n", "    approval: {required: true, ttl: 1s}\n", 1))})
		c := w.env.StartServer(harness.ServerOptions{}).Client
		first := prepare(t, c, w.agent, "payout", refundFor(t, "c", 100))
		ends := approve(t, c, w.approver, first).GetOperation().GetApproval().GetExpireTime().AsTime()
		// Past the approval's end (the database's clock is this machine's).
		require.Eventually(t, func() bool { return time.Now().After(ends.Add(200 * time.Millisecond)) }, 30*time.Second, 50*time.Millisecond)
		_, err := execute(c, w.agent, first.GetId(), 0)
		requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_EXPIRED")
		got, _ := get(t, c, w.agent, first.GetId())
		require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState())
		require.EqualValues(t, 0, got.GetBudgets()[0].GetCount(), "its share was released")

		second := prepare(t, c, w.agent, "payout", refundFor(t, "c", 100))
		_, err = decide(c, w.approver, first.GetId(), first.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
		require.Contains(t, err.Error(), "the approval was not recorded")
		got, _ = get(t, c, w.agent, first.GetId())
		require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState(), "nothing changed")

		_, err = decide(c, w.approver, second.GetId(), second.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
		require.NoError(t, err)
		renewed, err := decide(c, w.approver, first.GetId(), first.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_READY, renewed.GetOperation().GetState())
		got, _ = get(t, c, w.agent, first.GetId())
		require.EqualValues(t, 1, got.GetBudgets()[0].GetCount(), "its share is taken again")
	})
}

// TestLimitShareOfAnUnstoredOperationIsReleased: a Prepare reserves its
// budget share before the insert that takes the business identity (docs/
// policy.md, "How a reservation is made"); a Prepare whose identity another
// key holds, or whose key replays an operation, stores nothing and must
// give its share back, so the budget still admits exactly its count.
func TestLimitShareOfAnUnstoredOperationIsReleased(t *testing.T) {
	t.Parallel()
	limitPaths(t, `  - {name: two_payments, tools: [pay], window: 1h, count: 2}
`, func(t *testing.T, limitsYAML string) {
		w := newWorld(t, harness.Options{ToolsYAML: budgetTools(limitsYAML)})
		c := w.env.StartServer(harness.ServerOptions{}).Client
		prepare := func(key string, args *structpb.Struct) (*opledgerv1.PrepareResponse, error) {
			return c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "pay", Args: args, Execute: true})
		}
		first := payArgs(t, "INV-1")
		resp, err := prepare("k1", first)
		require.NoError(t, err)
		for range 5 {
			_, err = prepare(harness.Unique("k"), first)
			requireStatus(t, err, codes.AlreadyExists, "OPERATION_DUPLICATE")
			again, err := prepare("k1", first)
			require.NoError(t, err, "a replay")
			require.Equal(t, resp.GetOperation().GetId(), again.GetOperation().GetId())
		}
		_, err = prepare("k2", payArgs(t, "INV-2"))
		require.NoError(t, err, "the refused and replayed Prepares hold no share")
		_, err = prepare("k3", payArgs(t, "INV-3"))
		requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
		got, err := c.Get(harness.Ctx(w.agent, ""), &opledgerv1.GetRequest{OperationId: resp.GetOperation().GetId()})
		require.NoError(t, err)
		require.Len(t, got.GetOperation().GetBudgets(), 1)
		require.EqualValues(t, 2, got.GetOperation().GetBudgets()[0].GetCount())
	})
}

// undoneOnce is the ledger's statements with the first insert of each key
// undone as PostgreSQL undoes a deadlock's victim (store.ErrRetry), nothing
// stored.
type undoneOnce struct {
	ledger.Statements
	mu   sync.Mutex
	seen map[string]bool
}

func (u *undoneOnce) OperationInsert(ctx context.Context, conn *store.Conn, n store.NewOperation) (ledger.Operation, bool, error) {
	u.mu.Lock()
	first := !u.seen[n.IdempotencyKey]
	u.seen[n.IdempotencyKey] = true
	u.mu.Unlock()
	if first {
		return ledger.Operation{}, false, store.ErrRetry
	}
	return u.Statements.OperationInsert(ctx, conn, n)
}

// TestPrepareRetriesAnInsertUndoneAsADeadlock: a Prepare whose insert
// PostgreSQL undid as a deadlock (an approval with edits crossing its locks,
// a prune under a replay: docs/policy.md) sends it again instead of
// answering INTERNAL, on both ways of reserving, with the share counted once.
func TestPrepareRetriesAnInsertUndoneAsADeadlock(t *testing.T) {
	t.Parallel()
	limitPaths(t, `  - {name: two_payments, tools: [pay], window: 1h, count: 2}
`, func(t *testing.T, limitsYAML string) {
		w := newWorld(t, harness.Options{ToolsYAML: budgetTools(limitsYAML)})
		c := w.env.StartServer(harness.ServerOptions{Hooks: &ledger.Hooks{Statements: func(s ledger.Statements) ledger.Statements {
			return &undoneOnce{Statements: s, seen: map[string]bool{}}
		}}}).Client
		resp, err := oneCall(c, w.agent, "pay", payArgs(t, "INV-1"))
		require.NoError(t, err)
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
		got, _ := get(t, c, w.agent, resp.GetOperation().GetId())
		require.EqualValues(t, 1, got.GetBudgets()[0].GetCount(), "counted once")
		_, err = oneCall(c, w.agent, "pay", payArgs(t, "INV-2"))
		require.NoError(t, err)
		_, err = oneCall(c, w.agent, "pay", payArgs(t, "INV-3"))
		requireStatus(t, err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	})
}
