package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// Policies (docs/policy.md). A tool version's rules are judged at Prepare,
// at each decision (with the row locked) and, for an operation judged under
// a policy that is no longer in force, before it is sent: the claim sends
// only an operation whose policy_digest is one this server holds current
// (GuardPolicyCurrent), and any other is judged again here first
// (OperationPolicyApply, guarded by the digest it was read with).

// policyDenied is the refusal of a call a deny rule holds for, or that a
// rule could not be evaluated for.
func policyDenied(t *tool.Tool, j tool.Judgement, err error) error {
	var re *tool.RuleError
	if errors.As(err, &re) {
		return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_POLICY_DENIED,
			Message:  fmt.Sprintf("%s@%s: %s; the call is refused (a rule that cannot be evaluated never allows)", t.Name, t.Version, re.Error()),
			Metadata: map[string]string{"rule": re.Rule, "policy_digest": t.Policy.Digest}}
	}
	if err != nil {
		return err
	}
	return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_POLICY_DENIED,
		Message:  fmt.Sprintf("%s@%s: refused by the policy's rule %s: %s", t.Name, t.Version, j.Denied.Name, j.Denied.Message),
		Metadata: map[string]string{"rule": "deny." + j.Denied.Name, "policy_digest": t.Policy.Digest}}
}

// judge is t's policy for a call with args by the principal a.
func judge(t *tool.Tool, a Actor, args *structpb.Struct) (tool.Judgement, error) {
	if !t.HasRules() {
		if t.Approval.Required {
			return tool.Judgement{Needed: t.Approval.Approvers, Rule: "approval.required"}, nil
		}
		return tool.Judgement{}, nil
	}
	j, err := t.Judge(tool.RuleInput{Args: args, Tenant: a.Tenant,
		Principal: tool.Principal{ID: a.ID, Name: a.Name, Roles: a.Roles}})
	if err != nil || j.Denied != nil {
		return tool.Judgement{}, policyDenied(t, j, err)
	}
	return j, nil
}

// policyDigests lists the digest of every tool version's policy this server
// holds, for the claim's GuardPolicyCurrent.
func policyDigests(reg *tool.Registry) []string {
	var out []string
	for _, t := range reg.List() {
		out = append(out, t.Policy.Digest)
	}
	return out
}

// policyCurrent reports whether op was judged under the policy its tool
// version has on this server.
func (l *Ledger) policyCurrent(op Operation) bool {
	b, ok := l.bound[op.Tool+"@"+op.ToolVersion]
	return ok && b.tool.Policy.Digest == op.PolicyDigest
}

// preparer is the principal that prepared op, as a rule sees it: the rules
// judge the call its preparer made, whoever asks to send it.
func (l *Ledger) preparer(ctx context.Context, c *store.Conn, op Operation) (Actor, error) {
	p, err := c.PrincipalGet(ctx, op.Tenant, store.PrincipalRef{ID: op.PreparedBy})
	if errors.Is(err, store.ErrNotFound) {
		// Deleted since: the rules see its id and no name or roles.
		return Actor{ID: op.PreparedBy, Tenant: op.Tenant}, nil
	}
	if err != nil {
		return Actor{}, err
	}
	return Actor{ID: p.ID, Tenant: p.Tenant, Name: p.Name, Roles: p.Roles}, nil
}

// judgeAgain judges op, judged under another policy, under the one in force
// on this server.
func (l *Ledger) judgeAgain(ctx context.Context, c *store.Conn, op Operation) (*tool.Tool, tool.Judgement, error) {
	b, err := l.toolOf(op)
	if err != nil {
		return nil, tool.Judgement{}, err
	}
	who, err := l.preparer(ctx, c, op)
	if err != nil {
		return nil, tool.Judgement{}, err
	}
	var args structpb.Struct
	if err := protojson.Unmarshal(op.Args, &args); err != nil {
		return nil, tool.Judgement{}, fmt.Errorf("ledger: stored args of %s: %w", op.ID, err)
	}
	t := b.tool
	if !t.HasRules() {
		j, _ := judge(t, who, &args)
		return t, j, nil
	}
	j, err := t.Judge(tool.RuleInput{Args: &args, Tenant: op.Tenant,
		Principal: tool.Principal{ID: who.ID, Name: who.Name, Roles: who.Roles}})
	var re *tool.RuleError
	if errors.As(err, &re) {
		// Refused, as at Prepare: a rule that cannot be evaluated never
		// allows.
		return t, tool.Judgement{Denied: &tool.DenyRule{Name: re.Rule, Message: re.Error()}}, nil
	}
	return t, j, err
}

// rejudge applies the policy in force to a READY operation nothing was sent
// for, judged under another policy (the claim refused it for that). It
// returns nil when the operation may be claimed again (judged current, or
// changed meanwhile), or the answer: POLICY_DENIED (now REJECTED) or
// APPROVAL_REQUIRED (now awaiting what the policy demands).
func (l *Ledger) rejudge(ctx context.Context, a Actor, op Operation) error {
	conn := &l.store.Conn
	t, j, err := l.judgeAgain(ctx, conn, op)
	if err != nil {
		return storeErr(err)
	}
	needed := max(int32(j.Needed), op.ApprovalsNeeded)
	have := int32(len(ApprovalsOf(op.Approvals)))
	var event EventKind
	var to State
	var detail string
	switch {
	case j.Denied != nil:
		event, to = EventPolicyChanged, StateRejected
		detail = fmt.Sprintf("refused by the policy in force (%s, policy %s): %s", j.Denied.Name, short(t.Policy.Digest), j.Denied.Message)
	case have < needed:
		event, to = EventPolicyChanged, StateAwaitingApproval
		detail = fmt.Sprintf("the policy in force (%s, policy %s) needs %d approval(s); it has %d", j.Rule, short(t.Policy.Digest), needed, have)
	default:
		event, to = EventPolicyChecked, StateReady
		detail = fmt.Sprintf("judged again under policy %s (was %s): nothing more needed", short(t.Policy.Digest), short(op.PolicyDigest))
	}
	p, err := l.policyApply(op, event, to, ByClaimant)
	if err != nil {
		return storeErr(err)
	}
	p.PolicyDigest, p.ApprovalsNeeded, p.ApprovalTTL, p.ApprovalRule = t.Policy.Digest, int32(j.Needed), t.Approval.TTL, j.Rule
	p.RequireShort, p.RequireMet = to == StateAwaitingApproval, to == StateReady
	p.Actor, p.Detail, p.Notify = a.Name, detail, l.notifyOn()
	_, err = conn.OperationPolicyApply(ctx, p)
	if errors.Is(err, store.ErrConditionFailed) {
		return nil // judged, sent or decided meanwhile: claim again
	}
	if err != nil {
		return storeErr(err)
	}
	switch to {
	case StateRejected:
		le := policyDenied(t, j, nil).(*Error)
		le.Message += "; the operation was prepared under an earlier policy and is now REJECTED: nothing was sent"
		le.Metadata["operation_id"] = op.ID
		return le
	case StateAwaitingApproval:
		if l.notifyOn() {
			l.kickNotifier()
		}
		return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_REQUIRED,
			Message:  fmt.Sprintf("the policy changed since the operation was prepared: it now needs %d approval(s) (%s) before it is sent; nothing was sent", needed, j.Rule),
			Metadata: map[string]string{"operation_id": op.ID, "policy_digest": t.Policy.Digest}}
	}
	return nil
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	if digest == "" {
		return "(none)"
	}
	return digest
}

// approvalTTL is the approval window an operation judged j gets: the
// tool's TTL when it needs approval, none otherwise.
func approvalTTL(t *tool.Tool, j tool.Judgement) time.Duration {
	if j.Needed == 0 {
		return 0
	}
	return t.Approval.TTL
}
