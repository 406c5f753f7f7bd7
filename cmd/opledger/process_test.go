package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// fastTools is the demo pay_invoice with timeouts short enough for leases
// of a few seconds.
const fastTools = `
tools:
  - name: pay_invoice
    version: "1"
    effect: side_effect
    approval: {required: true, ttl: 15m}
    args_schema:
      type: object
      required: [invoice_id, amount_minor, currency]
      additionalProperties: false
      properties:
        invoice_id: {type: string, minLength: 1}
        amount_minor: {type: integer, exclusiveMinimum: 0}
        currency: {type: string, pattern: "^[A-Z]{3}$"}
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/charges
      lookup_url: ${OPLEDGER_FAKEPAY_URL}/charges?idempotency_key={key}
      lookup_consistent: true
      dedupes_keys: true
      external_ref_field: id
      timeout: 1s
      max_attempts: 1
`

// prepareApproved prepares and approves one pay_invoice operation.
func prepareApproved(t *testing.T, c opledgerv1.LedgerServiceClient, agent, approver string) *opledgerv1.Operation {
	t.Helper()
	args, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR"})
	require.NoError(t, err)
	p, err := c.Prepare(harness.Ctx(agent, harness.Unique("inv")), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args})
	require.NoError(t, err)
	_, err = c.Approve(harness.Ctx(approver, ""), &opledgerv1.ApproveRequest{
		OperationId: p.GetOperation().GetId(), Fingerprint: p.GetOperation().GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE})
	require.NoError(t, err)
	return p.GetOperation()
}

// TestTwoProcessesConcurrentExecute sends 64 concurrent Executes of one
// operation to two real `opledger serve` processes: the processor must see
// exactly one charge and every caller the same success.
func TestTwoProcessesConcurrentExecute(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	a := env.StartProcess(harness.ProcessOptions{})
	b := env.StartProcess(harness.ProcessOptions{})
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")
	op := prepareApproved(t, a.Client, agent, approver)

	clients := []opledgerv1.LedgerServiceClient{a.Client, b.Client}
	var wg sync.WaitGroup
	results := make(chan *opledgerv1.ExecuteResponse, 64)
	errs := make(chan error, 64)
	start := make(chan struct{})
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c := clients[rand.IntN(len(clients))]
			r, err := c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId(), Wait: durationpb.New(10 * time.Second)})
			if err != nil {
				errs <- err
				return
			}
			results <- r
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Errorf("Execute failed: %v", err)
	}
	fresh := 0
	var ref string
	for r := range results {
		require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, r.GetOperation().GetState())
		if !r.GetReplayed() {
			fresh++
		}
		if ref == "" {
			ref = r.GetOperation().GetExternalRef()
		}
		require.Equal(t, ref, r.GetOperation().GetExternalRef(), "every caller sees the same charge")
	}
	require.LessOrEqual(t, fresh, 64)
	charges := env.Fakepay.Charges()
	require.Len(t, charges, 1, "exactly one charge at the processor")
	require.Equal(t, charges[0].ID, ref)

	got, err := b.Client.Get(harness.Ctx(agent, ""), &opledgerv1.GetRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.EqualValues(t, 1, got.GetOperation().GetAttempts(), "one claim only")
}

// TestKillAfterDownstreamCommit kills the server with SIGKILL after the
// processor committed the charge and before the ledger recorded it; after a
// restart the background reconciler finds the charge by its downstream key
// and completes the operation with no client call and no second charge.
func TestKillAfterDownstreamCommit(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: []byte(fastTools)})
	p := env.StartProcess(harness.ProcessOptions{Env: []string{
		"OPLEDGER_FAILPOINTS=after-downstream=1*kill",
		"OPLEDGER_MIN_LEASE=2s", "OPLEDGER_RECONCILE_INTERVAL=200ms", "OPLEDGER_RECONCILE_BACKOFF=200ms",
	}})
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")
	op := prepareApproved(t, p.Client, agent, approver)

	_, err := p.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.Error(t, err, "the server died mid-call")
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.True(t, p.Wait(10*time.Second), "the failpoint killed the server")
	require.Len(t, env.Fakepay.Charges(), 1, "the processor committed before the kill")

	p.Restart("OPLEDGER_FAILPOINTS=")
	var final *opledgerv1.Operation
	require.Eventually(t, func() bool {
		r, err := p.Client.Get(harness.Ctx(agent, ""), &opledgerv1.GetRequest{OperationId: op.GetId()})
		if err != nil {
			return false
		}
		final = r.GetOperation()
		return final.GetState() == opledgerv1.State_STATE_SUCCEEDED
	}, 20*time.Second, 100*time.Millisecond, "the reconciler resolves the operation")
	charges := env.Fakepay.Charges()
	require.Len(t, charges, 1, "still exactly one charge")
	require.Equal(t, charges[0].ID, final.GetExternalRef())

	r, err := p.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.NoError(t, err)
	require.True(t, r.GetReplayed())
	require.Len(t, env.Fakepay.Charges(), 1)
}

// TestGracefulShutdown: SIGTERM lets the server finish and exit cleanly.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	p := env.StartProcess(harness.ProcessOptions{})
	p.Stop()
	require.True(t, p.Exited())
	require.NotContains(t, p.Logs(), "panic")
	_ = context.Background()
}
