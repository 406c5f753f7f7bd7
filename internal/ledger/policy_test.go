package ledger_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
)

// policyTools is a tools file with a refund tool whose policy is docs/
// policy.md's worked example (no approval below 50 EUR, one approver up to
// 1,000 EUR, two above, EUR only), and a mail tool whose approval rule is
// approvalRule (YAML under `approval:`, or "" for none) and deny rules deny.
func policyTools(approvalRule, deny string) []byte {
	mail := `
  - name: mail
    version: "1"
    effect: side_effect
` + deny
	if approvalRule != "" {
		mail += "    approval:\n" + approvalRule
	}
	mail += `
    args_schema:
      type: object
      properties:
        to: {type: string}
        subject: {type: string}
        body: {type: string}
      required: [to, subject, body]
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/emails
      external_ref_field: id
`
	return []byte(`tools:
  - name: refund
    version: "1"
    effect: side_effect
    deny:
      - name: eur_only
        when: args.currency != "EUR"
        message: refunds are paid in EUR only
    approval:
      when: args.amount_minor >= 5000
      approvers: "args.amount_minor > 100000 ? 2 : 1"
      ttl: 15m
      editable: [amount_minor]
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
      external_ref_field: id
` + mail)
}

func refundArgs(t *testing.T, amount float64, currency string) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{"invoice_id": harness.Unique("INV"), "amount_minor": amount, "currency": currency})
	require.NoError(t, err)
	return s
}

func errorInfo(t *testing.T, err error) *errdetails.ErrorInfo {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	t.Fatalf("no ErrorInfo in %v", err)
	return nil
}

// TestPolicyDenyRefusesAndStoresNothing: a deny rule refuses the Prepare
// with POLICY_DENIED naming the rule, and the key stays free.
func TestPolicyDenyRefusesAndStoresNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("", "")})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	key := harness.Unique("idem")
	_, err := c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "refund", Args: refundArgs(t, 1000, "USD")})
	requireStatus(t, err, codes.FailedPrecondition, "POLICY_DENIED")
	info := errorInfo(t, err)
	require.Equal(t, "deny.eur_only", info.GetMetadata()["rule"])
	require.Len(t, info.GetMetadata()["policy_digest"], 64)
	require.Contains(t, err.Error(), "refunds are paid in EUR only")

	// Nothing was stored: the same key with allowed args is a new operation.
	resp, err := c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "refund", Args: refundArgs(t, 1000, "EUR")})
	require.NoError(t, err)
	require.False(t, resp.GetReplayed())
	op := resp.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_READY, op.GetState(), "below 50 EUR needs no approval")
	require.Equal(t, info.GetMetadata()["policy_digest"], op.GetPolicyDigest())
	require.EqualValues(t, 0, op.GetApproval().GetApprovalsNeeded())
}

// TestPolicyApprovalWhenAndQuorum: the approval rule and the quorum follow
// the amount; with two approvers, each must be distinct and none the
// preparer, the same approver twice counts once, READY comes at the second,
// and the decisions so far are on the operation.
func TestPolicyApprovalWhenAndQuorum(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("", "")})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	second := w.env.Key("acme", "approver")

	one := prepare(t, c, w.agent, "refund", refundArgs(t, 5000, "EUR"))
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, one.GetState())
	require.EqualValues(t, 1, one.GetApproval().GetApprovalsNeeded())
	require.Equal(t, "approval.when", one.GetApproval().GetRule())
	require.Equal(t, opledgerv1.State_STATE_READY, approve(t, c, w.approver, one).GetOperation().GetState())

	two := prepare(t, c, w.agent, "refund", refundArgs(t, 250000, "EUR"))
	require.EqualValues(t, 2, two.GetApproval().GetApprovalsNeeded())

	// The preparer may not approve, even with a quorum.
	preparerApprover := w.env.Key("acme", "agent", "approver")
	own := prepare(t, c, preparerApprover, "refund", refundArgs(t, 250000, "EUR"))
	_, err := decide(c, preparerApprover, own.GetId(), own.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
	requireStatus(t, err, codes.PermissionDenied, "SELF_APPROVAL_FORBIDDEN")

	first := approve(t, c, w.approver, two)
	require.False(t, first.GetReplayed())
	got := first.GetOperation()
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState(), "one of two")
	require.Len(t, got.GetApproval().GetApprovals(), 1)
	require.Equal(t, opledgerv1.Decision_DECISION_APPROVE, got.GetApproval().GetApprovals()[0].GetDecision())
	require.Equal(t, two.GetFingerprint(), got.GetApproval().GetApprovals()[0].GetFingerprint())
	_, err = execute(c, w.agent, two.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_REQUIRED")

	again := approve(t, c, w.approver, two)
	require.True(t, again.GetReplayed(), "the same approver twice is one approval")
	require.Len(t, again.GetOperation().GetApproval().GetApprovals(), 1)

	done := approve(t, c, second, two)
	require.False(t, done.GetReplayed())
	require.Equal(t, opledgerv1.State_STATE_READY, done.GetOperation().GetState())
	require.Len(t, done.GetOperation().GetApproval().GetApprovals(), 2)
	require.True(t, done.GetOperation().GetApproval().GetExpireTime().IsValid())

	resp, err := execute(c, w.agent, two.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Charges(), 1)

	// One denial rejects, after an approval too; the approver who approved
	// cannot turn it into a denial.
	three := prepare(t, c, w.agent, "refund", refundArgs(t, 250000, "EUR"))
	approve(t, c, w.approver, three)
	_, err = decide(c, w.approver, three.GetId(), three.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_CONFLICT")
	denied, err := decide(c, second, three.GetId(), three.GetFingerprint(), opledgerv1.Decision_DECISION_DENY)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_REJECTED, denied.GetOperation().GetState())
}

// TestPolicyTightenedReachesPreparedOperation is the case: an
// operation prepared while its tool needed no approval sits READY; the
// operator adds an approval rule and restarts. Its Execute must not send
// it: the claim carries the policy in force, and the operation waits for an
// approver, with the event log saying why.
func TestPolicyTightenedReachesPreparedOperation(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("", "")})
	old := w.env.StartServer(harness.ServerOptions{})
	op := prepare(t, old.Client, w.agent, "mail", emailArgs(t))
	require.Equal(t, opledgerv1.State_STATE_READY, op.GetState())
	old.Stop()

	w.env.ToolsYAML = policyTools("      required: true\n      ttl: 15m\n", "")
	c := w.env.StartServer(harness.ServerOptions{}).Client
	_, err := execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_REQUIRED")
	require.Contains(t, err.Error(), "the policy changed")
	require.Empty(t, w.env.Fakepay.Emails(), "nothing was sent without the approval the policy in force demands")

	got, evs := get(t, c, w.approver, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState())
	require.NotEqual(t, op.GetPolicyDigest(), got.GetPolicyDigest())
	require.EqualValues(t, 1, got.GetApproval().GetApprovalsNeeded())
	last := evs[len(evs)-1]
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_POLICY_CHANGED, last.GetType())
	require.Contains(t, last.GetDetail(), got.GetPolicyDigest()[:12])

	approve(t, c, w.approver, got)
	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Emails(), 1)
}

// TestPolicyDenyAddedReachesPreparedOperation: a deny rule added after the
// Prepare refuses the send; the operation is REJECTED, nothing sent.
func TestPolicyDenyAddedReachesPreparedOperation(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("", "")})
	old := w.env.StartServer(harness.ServerOptions{})
	op := prepare(t, old.Client, w.agent, "mail", emailArgs(t))
	awaiting := prepare(t, old.Client, w.agent, "refund", refundArgs(t, 6000, "EUR"))
	old.Stop()

	w.env.ToolsYAML = []byte(strings.Replace(string(policyTools("", `    deny:
      - name: no_mail
        when: args.to.endsWith("@example.com")
        message: mail to example.com is switched off
`)), `when: args.currency != "EUR"`, `when: args.currency != "EUR" || args.amount_minor > 5500`, 1))
	c := w.env.StartServer(harness.ServerOptions{}).Client
	_, err := execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "POLICY_DENIED")
	require.Equal(t, "deny.no_mail", errorInfo(t, err).GetMetadata()["rule"])
	require.Empty(t, w.env.Fakepay.Emails())
	got, evs := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_REJECTED, got.GetState())
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_POLICY_CHANGED, evs[len(evs)-1].GetType())
	// Its replay says the same.
	_, err = execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "POLICY_DENIED")
	require.Contains(t, err.Error(), "the policy in force refused the operation before anything was sent")

	// An approver deciding on an operation the policy in force refuses is
	// told so, and the operation is rejected.
	_, err = decide(c, w.approver, awaiting.GetId(), awaiting.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
	requireStatus(t, err, codes.FailedPrecondition, "POLICY_DENIED")
	got, _ = get(t, c, w.agent, awaiting.GetId())
	require.Equal(t, opledgerv1.State_STATE_REJECTED, got.GetState())
}

// TestPolicyQuorumRaisedBeforeSend: an approved operation whose policy now
// demands two approvers waits for a second; its first approval still
// counts.
func TestPolicyQuorumRaisedBeforeSend(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("      required: true\n      ttl: 15m\n", "")})
	old := w.env.StartServer(harness.ServerOptions{})
	op := prepare(t, old.Client, w.agent, "mail", emailArgs(t))
	approved := approve(t, old.Client, w.approver, op).GetOperation()
	require.Equal(t, opledgerv1.State_STATE_READY, approved.GetState())
	old.Stop()

	w.env.ToolsYAML = policyTools("      required: true\n      approvers: 2\n      ttl: 15m\n", "")
	c := w.env.StartServer(harness.ServerOptions{}).Client
	_, err := execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_REQUIRED")
	got, _ := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState())
	require.EqualValues(t, 2, got.GetApproval().GetApprovalsNeeded())
	require.Len(t, got.GetApproval().GetApprovals(), 1, "the approval in force still counts")

	again := approve(t, c, w.approver, got)
	require.True(t, again.GetReplayed())
	done := approve(t, c, w.env.Key("acme", "approver"), got)
	require.Equal(t, opledgerv1.State_STATE_READY, done.GetOperation().GetState())
	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	require.Len(t, w.env.Fakepay.Emails(), 1)
}

// TestPolicyWeakerNeverReleasesAnAwaitingOperation: a policy that no longer
// needs approval does not release an operation awaiting a decision.
func TestPolicyWeakerNeverReleasesAnAwaitingOperation(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("      required: true\n      ttl: 15m\n", "")})
	old := w.env.StartServer(harness.ServerOptions{})
	op := prepare(t, old.Client, w.agent, "mail", emailArgs(t))
	old.Stop()

	w.env.ToolsYAML = policyTools("", "")
	c := w.env.StartServer(harness.ServerOptions{}).Client
	_, err := execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_REQUIRED")
	require.Empty(t, w.env.Fakepay.Emails())
	// It is still decided as it was prepared: one approval sends it.
	got, _ := get(t, c, w.agent, op.GetId())
	approve(t, c, w.approver, got)
	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
}

// TestPolicyChangeThatDemandsNothingMore: an operation judged under an
// older policy that demands no more is judged current and sent, with a
// POLICY_CHECKED event.
func TestPolicyChangeThatDemandsNothingMore(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("", "")})
	old := w.env.StartServer(harness.ServerOptions{})
	op := prepare(t, old.Client, w.agent, "mail", emailArgs(t))
	old.Stop()

	w.env.ToolsYAML = policyTools("", `    deny:
      - name: no_spam
        when: args.subject.contains("lottery")
`)
	c := w.env.StartServer(harness.ServerOptions{}).Client
	resp, err := execute(c, w.agent, op.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, resp.GetOperation().GetState())
	_, evs := get(t, c, w.agent, op.GetId())
	require.Contains(t, eventTypes(evs), opledgerv1.EventType_EVENT_TYPE_POLICY_CHECKED, fmt.Sprint(eventTypes(evs)))
}

func editArgs(t *testing.T, op *opledgerv1.Operation, amount float64) *structpb.Struct {
	t.Helper()
	m := op.GetArgs().AsMap()
	m["amount_minor"] = amount
	s, err := structpb.NewStruct(m)
	require.NoError(t, err)
	return s
}

func approveEdit(c opledgerv1.LedgerServiceClient, key string, op *opledgerv1.Operation, edited *structpb.Struct) (*opledgerv1.ApproveResponse, error) {
	return c.Approve(harness.Ctx(key, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(), Fingerprint: op.GetFingerprint(),
		Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "40 instead of 49", EditedArgs: edited})
}

// TestApproveWithEdit: "the same, but 40 EUR instead of 60": a new
// operation with the edited arguments, approved by the editor and linked
// both ways; the original is REJECTED and its Execute names the new one;
// the same edit again is a replay, another a conflict; only editable
// fields may change, never by the preparer; one charge, of the edited
// amount.
func TestApproveWithEdit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("", "")})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	op := prepare(t, c, w.agent, "refund", refundArgs(t, 6000, "EUR"))
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, op.GetState())

	// Bad edits change nothing.
	bad := op.GetArgs().AsMap()
	bad["currency"] = "USD"
	badArgs, _ := structpb.NewStruct(bad)
	_, err := approveEdit(c, w.approver, op, badArgs)
	requireStatus(t, err, codes.InvalidArgument, "ARGS_INVALID")
	require.Contains(t, err.Error(), "lets an approver edit only: amount_minor")
	_, err = approveEdit(c, w.approver, op, op.GetArgs())
	requireStatus(t, err, codes.InvalidArgument, "FIELD_INVALID")
	both := w.env.Key("acme", "agent", "approver")
	own := prepare(t, c, both, "refund", refundArgs(t, 6000, "EUR"))
	_, err = approveEdit(c, both, own, editArgs(t, own, 4000))
	requireStatus(t, err, codes.PermissionDenied, "SELF_APPROVAL_FORBIDDEN")
	_, err = c.Approve(harness.Ctx(w.approver, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(), Fingerprint: op.GetFingerprint(),
		Decision: opledgerv1.Decision_DECISION_DENY, EditedArgs: editArgs(t, op, 4000)})
	requireStatus(t, err, codes.InvalidArgument, "FIELD_INVALID")
	got, _ := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState())

	resp, err := approveEdit(c, w.approver, op, editArgs(t, op, 4000))
	require.NoError(t, err)
	require.False(t, resp.GetReplayed())
	orig, edited := resp.GetOperation(), resp.GetEdited()
	require.Equal(t, opledgerv1.State_STATE_REJECTED, orig.GetState())
	require.Equal(t, edited.GetId(), orig.GetSupersededBy())
	require.Equal(t, op.GetId(), edited.GetSupersedes())
	require.Equal(t, opledgerv1.State_STATE_READY, edited.GetState(), "the editor's approval completes a quorum of one")
	require.EqualValues(t, 4000, edited.GetArgs().AsMap()["amount_minor"])
	require.NotEqual(t, op.GetFingerprint(), edited.GetFingerprint())
	require.Len(t, edited.GetApproval().GetApprovals(), 1)
	require.Equal(t, edited.GetFingerprint(), edited.GetApproval().GetApprovals()[0].GetFingerprint(), "the editor approved what they saw")

	again, err := approveEdit(c, w.approver, op, editArgs(t, op, 4000))
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	require.Equal(t, edited.GetId(), again.GetEdited().GetId())
	_, err = approveEdit(c, w.approver, op, editArgs(t, op, 3000))
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_CONFLICT")

	_, err = execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "OPERATION_SUPERSEDED")
	require.Equal(t, edited.GetId(), errorInfo(t, err).GetMetadata()["superseded_by"])
	res, err := execute(c, w.agent, edited.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, res.GetOperation().GetState())
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1)
	require.EqualValues(t, 4000, charges[0].AmountMinor)
}

// TestApproveWithEditJudgedAgain: the edit passes the policy again: an edit
// into two-approver territory still needs a second approver.
func TestApproveWithEditJudgedAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("", "")})
	c := w.env.StartServer(harness.ServerOptions{}).Client
	op := prepare(t, c, w.agent, "refund", refundArgs(t, 6000, "EUR"))
	resp, err := approveEdit(c, w.approver, op, editArgs(t, op, 150000))
	require.NoError(t, err)
	edited := resp.GetEdited()
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, edited.GetState())
	require.EqualValues(t, 2, edited.GetApproval().GetApprovalsNeeded())
	_, err = execute(c, w.agent, edited.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "APPROVAL_REQUIRED")
	// The editor's second approval is the same approver: it counts once.
	again := approve(t, c, w.approver, edited)
	require.True(t, again.GetReplayed())
	done := approve(t, c, w.env.Key("acme", "approver"), edited)
	require.Equal(t, opledgerv1.State_STATE_READY, done.GetOperation().GetState())
	res, err := execute(c, w.agent, edited.GetId(), 0)
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, res.GetOperation().GetState())
	require.EqualValues(t, 150000, w.env.Fakepay.Charges()[0].AmountMinor)
}

// TestPolicyDenyKeepsReplays: a repeated Prepare of a call recorded before
// a deny rule was added is its replay, not a refusal; a new key is refused.
func TestPolicyDenyKeepsReplays(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: policyTools("", "")})
	old := w.env.StartServer(harness.ServerOptions{})
	key, args := harness.Unique("idem"), emailArgs(t)
	first, err := old.Client.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "mail", Args: args, Execute: true})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, first.GetOperation().GetState())
	old.Stop()

	w.env.ToolsYAML = policyTools("", `    deny:
      - name: no_mail
        when: "true"
`)
	c := w.env.StartServer(harness.ServerOptions{}).Client
	again, err := c.Prepare(harness.Ctx(w.agent, key), &opledgerv1.PrepareRequest{Tool: "mail", Args: args, Execute: true})
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	require.Equal(t, first.GetOperation().GetId(), again.GetOperation().GetId())
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, again.GetOperation().GetState())
	_, err = c.Prepare(harness.Ctx(w.agent, harness.Unique("idem")), &opledgerv1.PrepareRequest{Tool: "mail", Args: args})
	requireStatus(t, err, codes.FailedPrecondition, "POLICY_DENIED")
	require.Len(t, w.env.Fakepay.Emails(), 1)
}

// TestPolicyDenyAddedReachesALapsedApproval: an approved operation whose
// approval lapsed with nothing sent, under a policy that now refuses it, is
// not renewed into one the policy in force never judged: the renewal is
// refused POLICY_DENIED and the operation REJECTED, nothing sent (a
// renewal that stamped the new policy's digest on it would let the next
// claim send it). Found while modelling the policy change for TestModel.
func TestPolicyDenyAddedReachesALapsedApproval(t *testing.T) {
	t.Parallel()
	dbURL, cluster := pgtest.NewSteppedClockDatabase(t)
	w := newWorld(t, harness.Options{DatabaseURL: dbURL, ToolsYAML: policyTools("", "")})
	old := w.env.StartServer(harness.ServerOptions{})
	op := prepare(t, old.Client, w.agent, "refund", refundArgs(t, 6000, "EUR"))
	require.Equal(t, opledgerv1.State_STATE_READY, approve(t, old.Client, w.approver, op).GetOperation().GetState())
	old.Stop()
	require.NoError(t, cluster.SetClockOffset(20*time.Minute)) // past the 15 min approval

	w.env.ToolsYAML = []byte(strings.Replace(string(policyTools("", "")), `when: args.currency != "EUR"`, `when: args.currency != "EUR" || args.amount_minor > 5500`, 1))
	c := w.env.StartServer(harness.ServerOptions{}).Client
	_, err := decide(c, w.approver, op.GetId(), op.GetFingerprint(), opledgerv1.Decision_DECISION_APPROVE)
	requireStatus(t, err, codes.FailedPrecondition, "POLICY_DENIED")
	_, err = execute(c, w.agent, op.GetId(), 0)
	requireStatus(t, err, codes.FailedPrecondition, "POLICY_DENIED")
	got, evs := get(t, c, w.agent, op.GetId())
	require.Equal(t, opledgerv1.State_STATE_REJECTED, got.GetState())
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_POLICY_CHANGED, evs[len(evs)-1].GetType())
	require.Empty(t, w.env.Fakepay.Charges())
}
