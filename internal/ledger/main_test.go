package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// world is one test's environment seen from its clients: keys for each
// role of one tenant and the servers started for it.
type world struct {
	env                       *harness.Env
	agent, approver, operator string
}

func newWorld(t *testing.T, opts harness.Options) *world {
	t.Helper()
	env := harness.New(t, opts)
	return &world{
		env:      env,
		agent:    env.Key("acme", "agent"),
		approver: env.Key("acme", "approver"),
		operator: env.Key("acme", "operator"),
	}
}

func payArgs(t *testing.T, invoice string) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{"invoice_id": invoice, "amount_minor": 4900, "currency": "EUR"})
	require.NoError(t, err)
	return s
}

func emailArgs(t *testing.T) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{"to": "ada@example.com", "subject": "Invoice", "body": "Paid."})
	require.NoError(t, err)
	return s
}

func prepare(t *testing.T, c opledgerv1.LedgerServiceClient, key, tool string, args *structpb.Struct) *opledgerv1.Operation {
	t.Helper()
	resp, err := c.Prepare(harness.Ctx(key, harness.Unique("idem")), &opledgerv1.PrepareRequest{Tool: tool, Args: args})
	require.NoError(t, err)
	require.False(t, resp.GetReplayed())
	return resp.GetOperation()
}

func approve(t *testing.T, c opledgerv1.LedgerServiceClient, key string, op *opledgerv1.Operation) *opledgerv1.ApproveResponse {
	t.Helper()
	resp, err := decide(c, key, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
	require.NoError(t, err)
	return resp
}

func decide(c opledgerv1.LedgerServiceClient, key, id, fp string, d opledgerv1.Decision) (*opledgerv1.ApproveResponse, error) {
	return c.Approve(harness.Ctx(key, ""), &opledgerv1.ApproveRequest{OperationId: id, Fingerprint: fp, Decision: d, Reason: "test"})
}

// preparedApproved prepares a pay tool's operation and approves it.
func preparedApproved(t *testing.T, w *world, c opledgerv1.LedgerServiceClient, tool string) *opledgerv1.Operation {
	t.Helper()
	op := prepare(t, c, w.agent, tool, payArgs(t, harness.Unique("INV")))
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, op.GetState())
	return approve(t, c, w.approver, op).GetOperation()
}

func execute(c opledgerv1.LedgerServiceClient, key, id string, wait time.Duration) (*opledgerv1.ExecuteResponse, error) {
	return executeCtx(harness.Ctx(key, ""), c, id, wait)
}

func executeCtx(ctx context.Context, c opledgerv1.LedgerServiceClient, id string, wait time.Duration) (*opledgerv1.ExecuteResponse, error) {
	req := &opledgerv1.ExecuteRequest{OperationId: id}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return c.Execute(ctx, req)
}

func get(t *testing.T, c opledgerv1.LedgerServiceClient, key, id string) (*opledgerv1.Operation, []*opledgerv1.OperationEvent) {
	t.Helper()
	resp, err := c.Get(harness.Ctx(key, ""), &opledgerv1.GetRequest{OperationId: id, IncludeEvents: true})
	require.NoError(t, err)
	return resp.GetOperation(), resp.GetEvents()
}

func reconcile(t *testing.T, c opledgerv1.LedgerServiceClient, key, id string) *opledgerv1.ReconcileResponse {
	t.Helper()
	resp, err := c.Reconcile(harness.Ctx(key, ""), &opledgerv1.ReconcileRequest{OperationId: id})
	require.NoError(t, err)
	return resp
}

func eventTypes(evs []*opledgerv1.OperationEvent) []opledgerv1.EventType {
	out := make([]opledgerv1.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.GetType()
	}
	return out
}

// reasonOf returns the code and ErrorInfo reason of a gRPC error.
func reasonOf(t *testing.T, err error) (codes.Code, string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			require.Equal(t, "opledger.v1", info.GetDomain())
			return st.Code(), info.GetReason()
		}
	}
	return st.Code(), ""
}

func requireStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	gotCode, gotReason := reasonOf(t, err)
	require.Equal(t, code, gotCode, "error: %v", err)
	require.Equal(t, reason, gotReason, "error: %v", err)
}

// blocker is an AfterDownstream hook that parks calls until released,
// telling the test when the first call has arrived.
type blocker struct {
	arrived chan struct{}
	release chan struct{}
	first   chan struct{} // holds one token: only the first call blocks
}

func newBlocker() *blocker {
	b := &blocker{arrived: make(chan struct{}), release: make(chan struct{}), first: make(chan struct{}, 1)}
	b.first <- struct{}{}
	return b
}

func (b *blocker) hook(context.Context, ledger.Operation) {
	select {
	case <-b.first:
	default:
		return
	}
	close(b.arrived)
	<-b.release
}

// waitArrived waits for the first blocked call; a test that never gets one
// fails instead of hanging.
func (b *blocker) waitArrived(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-b.arrived:
	case <-done:
		t.Fatal("the call returned without reaching the hook")
	case <-time.After(30 * time.Second):
		t.Fatal("the downstream call never reached the hook")
	}
}
