package ledger_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
)

// payOnceTools is a pay tool that sends exactly once per Execute, to a
// downstream that dedupes keys and has a consistent lookup: an ambiguous
// answer stays ambiguous until reconciled.
func payOnceTools() []byte {
	return harness.ToolsYAML(harness.ToolSpec{Name: "pay_once", ApprovalTTL: 15 * time.Minute,
		MaxAttempts: 1, DedupesKeys: true, Lookup: true})
}

// storedReason is the ErrorInfo reason of an operation's stored error.
func storedReason(t *testing.T, op *opledgerv1.Operation) string {
	t.Helper()
	require.NotNil(t, op.GetError())
	for _, a := range op.GetError().GetDetails() {
		var info errdetails.ErrorInfo
		if a.UnmarshalTo(&info) == nil {
			return info.GetReason()
		}
	}
	return ""
}

// TestFaultRetriedUnderSameKey: a 500 before the processor committed is
// retried by the executor under the same key (pay_invoice dedupes, three
// attempts) and ends in one charge.
func TestFaultRetriedUnderSameKey(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_invoice")
	w.env.Fakepay.SetFaults(fakepay.Faults{FailBeforeCommit: fakepay.Trigger{Next: 1}})

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	got := resp.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.EqualValues(t, 1, got.GetAttempts(), "one claim, however many sends")
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, got.GetExternalRef())
	require.Zero(t, w.env.Fakepay.Faults().FailBeforeCommit.Next, "the fault fired")
}

// TestFaultUnknownThenNotFound: a single-attempt tool turns a 500 into
// OUTCOME_UNKNOWN; the consistent lookup finds nothing, so Reconcile makes
// the operation READY and the next Execute charges once.
func TestFaultUnknownThenNotFound(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: payOnceTools()})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_once")
	w.env.Fakepay.SetFaults(fakepay.Faults{FailBeforeCommit: fakepay.Trigger{Next: 1}})

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
	require.Equal(t, "DOWNSTREAM_OUTCOME_UNKNOWN", storedReason(t, resp.GetOperation()))
	require.Empty(t, w.env.Fakepay.Charges())

	// Execute never resubmits an unknown outcome.
	again, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, again.GetOperation().GetState())
	require.EqualValues(t, 1, again.GetOperation().GetAttempts())

	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, rec.GetOperation().GetState())
	require.Contains(t, rec.GetDetail(), "not found")

	resp, err = execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	got := resp.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.EqualValues(t, 2, got.GetAttempts())
	require.EqualValues(t, 2, got.GetFence())
	require.Nil(t, got.GetError(), "the earlier unknown outcome is resolved")
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, got.GetExternalRef())
}

// TestFaultCommittedButUnanswered: the processor charged, then answered 500
// or dropped the connection. With one attempt the ledger cannot know:
// OUTCOME_UNKNOWN. Reconcile finds the charge by key and records it.
func TestFaultCommittedButUnanswered(t *testing.T) {
	t.Parallel()
	for name, faults := range map[string]fakepay.Faults{
		"fail_after_commit": {FailAfterCommit: fakepay.Trigger{Next: 1}},
		"drop_after_commit": {DropAfterCommit: fakepay.Trigger{Next: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, harness.Options{ToolsYAML: payOnceTools()})
			c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
			op := preparedApproved(t, w, c, "pay_once")
			w.env.Fakepay.SetFaults(faults)

			resp, err := execute(c, w.agent, op.GetId(), 0)
			require.NoError(t, err)
			require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
			require.Empty(t, resp.GetOperation().GetExternalRef())
			charges := w.env.Fakepay.Charges()
			require.Len(t, charges, 1)

			rec := reconcile(t, c, w.agent, op.GetId())
			got := rec.GetOperation()
			require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState(), rec.GetDetail())
			require.Equal(t, charges[0].ID, got.GetExternalRef())
			require.Nil(t, got.GetError())

			again, err := execute(c, w.agent, op.GetId(), 0)
			require.NoError(t, err)
			require.True(t, again.GetReplayed())
			require.Equal(t, charges[0].ID, again.GetOperation().GetExternalRef())
			require.Len(t, w.env.Fakepay.Charges(), 1)

			_, evs := get(t, c, w.agent, op.GetId())
			require.Equal(t, []opledgerv1.EventType{opledgerv1.EventType_EVENT_TYPE_PREPARED, opledgerv1.EventType_EVENT_TYPE_APPROVED,
				opledgerv1.EventType_EVENT_TYPE_CLAIMED, opledgerv1.EventType_EVENT_TYPE_OUTCOME_UNKNOWN,
				opledgerv1.EventType_EVENT_TYPE_RECONCILED}, eventTypes(evs))
		})
	}
}

// TestFaultEmailWithoutDedupe: the mail service ignores keys and the
// connection drops after it sent. Nothing may ever resend: Execute keeps
// answering OUTCOME_UNKNOWN, Reconcile says it cannot tell, and only an
// operator resolves it.
func TestFaultEmailWithoutDedupe(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := prepare(t, c, w.agent, "send_email", emailArgs(t))
	require.Equal(t, opledgerv1.State_STATE_READY, op.GetState())
	w.env.Fakepay.SetFaults(fakepay.Faults{NoKeySupport: true, DropAfterCommit: fakepay.Trigger{Next: 1}})

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Emails(), 1)

	again, err := execute(c, w.agent, op.GetId(), time.Second)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, again.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Emails(), 1, "an unknown outcome is never resubmitted")

	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, rec.GetOperation().GetState())
	require.Contains(t, rec.GetDetail(), "inconclusive")

	emailID := w.env.Fakepay.Emails()[0].ID
	resolution := &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_SUCCEEDED, ExternalRef: emailID, Note: "seen in the mail log"}
	_, err = c.Reconcile(harness.Ctx(w.agent, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(), Resolution: resolution})
	requireStatus(t, err, codes.PermissionDenied, "OPERATOR_REQUIRED")

	for _, bad := range []opledgerv1.State{opledgerv1.State_STATE_EXECUTING, opledgerv1.State_STATE_UNSPECIFIED} {
		_, err = c.Reconcile(harness.Ctx(w.operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(),
			Resolution: &opledgerv1.Resolution{Outcome: bad}})
		requireStatus(t, err, codes.InvalidArgument, "FIELD_INVALID")
	}

	resolved, err := c.Reconcile(harness.Ctx(w.operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(), Resolution: resolution})
	require.NoError(t, err)
	got := resolved.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, got.GetState())
	require.Equal(t, emailID, got.GetExternalRef())
	require.Nil(t, got.GetError())

	// Once resolved, the same resolution repeated (an operator whose reply
	// was lost; Reconcile is IDEMPOTENT, so clients retry it) answers as the
	// first did and records nothing; any other verdict does not apply.
	repeat, err := c.Reconcile(harness.Ctx(w.operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(), Resolution: resolution})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, repeat.GetOperation().GetState())
	require.Equal(t, resolved.GetDetail(), repeat.GetDetail())
	require.Equal(t, resolved.GetOperation().GetUpdateTime().AsTime(), repeat.GetOperation().GetUpdateTime().AsTime())
	repeat, err = c.Reconcile(harness.Ctx(w.operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(),
		Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_SUCCEEDED, ExternalRef: emailID, Note: "seen in the mail log", Fence: got.GetFence()}})
	require.NoError(t, err, "the same verdict, naming the attempt it was about")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, repeat.GetOperation().GetState())
	for _, other := range []*opledgerv1.Resolution{
		{Outcome: opledgerv1.State_STATE_FAILED, Note: "seen in the mail log"},
		{Outcome: opledgerv1.State_STATE_SUCCEEDED, ExternalRef: "another-ref", Note: "seen in the mail log"},
		{Outcome: opledgerv1.State_STATE_SUCCEEDED, ExternalRef: emailID, Note: "another look"},
		{Outcome: opledgerv1.State_STATE_SUCCEEDED, ExternalRef: emailID, Note: "seen in the mail log", Fence: got.GetFence() + 1},
	} {
		_, err = c.Reconcile(harness.Ctx(w.operator, ""), &opledgerv1.ReconcileRequest{OperationId: op.GetId(), Resolution: other})
		requireStatus(t, err, codes.FailedPrecondition, "RESOLUTION_NOT_APPLICABLE")
	}

	final, evs := get(t, c, w.agent, op.GetId())
	resolutions := 0
	for _, ev := range evs {
		if ev.GetType() == opledgerv1.EventType_EVENT_TYPE_RESOLVED_MANUALLY {
			resolutions++
		}
	}
	require.Equal(t, 1, resolutions, "a repeated resolution records nothing")
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, final.GetState())
	last := evs[len(evs)-1]
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_RESOLVED_MANUALLY, last.GetType())
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, last.GetFromState())
	replay, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.True(t, replay.GetReplayed())
	require.Len(t, w.env.Fakepay.Emails(), 1)
}

// TestFaultDownstreamRefused: a 4xx is a definitive failure, stored and
// replayed without another send.
func TestFaultDownstreamRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_nowhere",
		URL: "${OPLEDGER_FAKEPAY_URL}/no-such-endpoint", DedupesKeys: true, MaxAttempts: 3})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := prepare(t, c, w.agent, "pay_nowhere", payArgs(t, "INV-1"))

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	got := resp.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_FAILED, got.GetState())
	require.Equal(t, "DOWNSTREAM_REJECTED", storedReason(t, got))
	require.EqualValues(t, codes.FailedPrecondition, got.GetError().GetCode())

	again, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	require.Equal(t, opledgerv1.State_STATE_FAILED, again.GetOperation().GetState())
	require.EqualValues(t, 1, again.GetOperation().GetAttempts())
}

// TestFaultConnectionRefused: nothing reached the downstream, so the
// operation is READY again and the caller is told to retry.
func TestFaultConnectionRefused(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := lis.Addr().String()
	require.NoError(t, lis.Close())

	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_closed",
		URL: "http://" + closed + "/charges", DedupesKeys: true, MaxAttempts: 2})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := prepare(t, c, w.agent, "pay_closed", payArgs(t, "INV-1"))

	_, err = execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.Unavailable, "DOWNSTREAM_UNAVAILABLE")

	got, evs := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_READY, got.GetState())
	require.EqualValues(t, 1, got.GetAttempts())
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_RELEASED, evs[len(evs)-1].GetType())
	require.Empty(t, w.env.Fakepay.Charges())
}

// TestFaultKeyForgottenByDownstream: the processor charged and dropped the
// connection, then forgot the key (its retention passed) before anyone
// reconciled. A lookup miss now proves nothing, and resubmitting the key
// would charge again: the operation must stay OUTCOME_UNKNOWN, with one
// charge, until an operator decides.
func TestFaultKeyForgottenByDownstream(t *testing.T) {
	t.Parallel()
	const retention = 300 * time.Millisecond
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_once",
		ApprovalTTL: 15 * time.Minute, MaxAttempts: 1, DedupesKeys: true, Lookup: true, KeyRetention: retention})})
	c := w.env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	op := preparedApproved(t, w, c, "pay_once")
	w.env.Fakepay.SetFaults(fakepay.Faults{DropAfterCommit: fakepay.Trigger{Next: 1}, KeyRetention: retention})

	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Charges(), 1)

	time.Sleep(2 * retention)
	rec := reconcile(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, rec.GetOperation().GetState(), rec.GetDetail())
	require.Contains(t, rec.GetDetail(), "forgotten the key")

	again, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, again.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Charges(), 1, "never a second charge")
}
