package ledger_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

func prepareExecute(c opledgerv1.LedgerServiceClient, agent, key, tool string, args *structpb.Struct) (*opledgerv1.PrepareResponse, error) {
	return c.Prepare(harness.Ctx(agent, key), &opledgerv1.PrepareRequest{Tool: tool, Args: args, Execute: true,
		Wait: durationpb.New(5 * time.Second)})
}

// TestOneCallPath (issue 13): Prepare with execute runs a tool that needs no
// approval in one call, leaving the same operation, events and effect as a
// Prepare followed by an Execute, and a retry of the same call replays both.
func TestOneCallPath(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	key := harness.Unique("mail")
	resp, err := prepareExecute(c, w.agent, key, "send_email", emailArgs(t))
	require.NoError(t, err)
	require.False(t, resp.GetReplayed())
	require.False(t, resp.GetExecutionReplayed())
	op := resp.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, op.GetState())
	require.EqualValues(t, 1, op.GetFence())
	require.EqualValues(t, 1, op.GetAttempts())
	emails := w.env.Fakepay.Emails()
	require.Len(t, emails, 1)
	require.Equal(t, emails[0].ID, op.GetExternalRef())
	require.Equal(t, op.GetDownstreamKey(), emails[0].IdempotencyKey)

	// The same as two calls would leave.
	two := prepare(t, c, w.agent, "send_email", emailArgs(t))
	twoDone, err := execute(c, w.agent, two.GetId(), 0)
	require.NoError(t, err)
	_, evsOne := get(t, c, w.agent, op.GetId())
	_, evsTwo := get(t, c, w.agent, twoDone.GetOperation().GetId())
	require.Equal(t, eventTypes(evsTwo), eventTypes(evsOne))
	for i := range evsOne {
		require.Equal(t, evsTwo[i].GetFromState(), evsOne[i].GetFromState())
		require.Equal(t, evsTwo[i].GetToState(), evsOne[i].GetToState())
		require.Equal(t, evsTwo[i].GetFence(), evsOne[i].GetFence())
		require.Equal(t, evsTwo[i].GetAttempt(), evsOne[i].GetAttempt())
	}

	again, err := prepareExecute(c, w.agent, key, "send_email", emailArgs(t))
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	require.True(t, again.GetExecutionReplayed())
	require.Equal(t, op.GetId(), again.GetOperation().GetId())
	require.Equal(t, op.GetExternalRef(), again.GetOperation().GetExternalRef())
	require.Len(t, w.env.Fakepay.Emails(), 2, "one for each operation, none for the retry")
}

// TestOneCallPathConcurrentTwins: the same call twenty times at once is one
// operation and one effect (the mail service does not dedupe keys).
func TestOneCallPathConcurrentTwins(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	key := harness.Unique("mail")
	var wg sync.WaitGroup
	ids := make([]string, 20)
	for i := range ids {
		wg.Go(func() {
			resp, err := prepareExecute(c, w.agent, key, "send_email", emailArgs(t))
			if err == nil {
				ids[i] = resp.GetOperation().GetId()
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	require.Len(t, w.env.Fakepay.Emails(), 1)
}

// TestOneCallPathWithApproval: a tool that needs approval is prepared and
// answered as Prepare answers it, with nothing sent; once approved, the same
// call executes it; once denied, it is refused with the operation's id.
func TestOneCallPathWithApproval(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	key := harness.Unique("invoice")
	resp, err := prepareExecute(c, w.agent, key, "pay_invoice", payArgs(t, "INV-1"))
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, resp.GetOperation().GetState())
	require.Empty(t, w.env.Fakepay.Charges())

	approve(t, c, w.approver, resp.GetOperation())
	done, err := prepareExecute(c, w.agent, key, "pay_invoice", payArgs(t, "INV-1"))
	require.NoError(t, err)
	require.True(t, done.GetReplayed())
	require.False(t, done.GetExecutionReplayed())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, done.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Charges(), 1)

	denyKey := harness.Unique("invoice")
	denied, err := prepareExecute(c, w.agent, denyKey, "pay_invoice", payArgs(t, "INV-2"))
	require.NoError(t, err)
	_, err = decide(c, w.approver, denied.GetOperation().GetId(), denied.GetOperation().GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
	require.NoError(t, err)
	_, err = prepareExecute(c, w.agent, denyKey, "pay_invoice", payArgs(t, "INV-2"))
	requireStatus(t, err, codes.FailedPrecondition, "OPERATION_REJECTED")
	require.Equal(t, denied.GetOperation().GetId(), operationIDOf(t, err))
	require.Len(t, w.env.Fakepay.Charges(), 1)
}

// TestOneCallPathRefusalNamesTheOperation: when the execution is refused
// (here: nothing reached the downstream), the caller learns which operation
// it prepared.
func TestOneCallPathRefusalNamesTheOperation(t *testing.T) {
	t.Parallel()
	down := newFlakyDownstream(t)
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "mail_flaky", Kind: harness.KindEmail,
		URL: "http://" + down.addr + "/emails"})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	_, err := prepareExecute(c, w.agent, harness.Unique("mail"), "mail_flaky", emailArgs(t))
	requireStatus(t, err, codes.Unavailable, "DOWNSTREAM_UNAVAILABLE")
	id := operationIDOf(t, err)
	got, _ := get(t, c, w.agent, id)
	require.Equal(t, opledgerv1.State_STATE_READY, got.GetState())
}

func operationIDOf(t *testing.T, err error) string {
	t.Helper()
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			require.NotEmpty(t, info.GetMetadata()["operation_id"])
			return info.GetMetadata()["operation_id"]
		}
	}
	t.Fatal("no ErrorInfo")
	return ""
}
