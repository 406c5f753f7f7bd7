package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/clients/go/fingerprint"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// prepareMethod is the method an edit's fingerprint names: the edited
// operation is the Prepare the agent would have made with those arguments.
const prepareMethod = "/opledger.v1.LedgerService/Prepare"

// EditResult is an approve-with-edit: the original, now REJECTED and
// superseded, and the operation that carries the edit.
type EditResult struct {
	Original, Edited Operation
	// Replayed is true when the same edit had already been recorded.
	Replayed bool
}

// ApproveEdited approves op "the same, but with these arguments"
// (docs/policy.md): only the tool's editable fields may differ. It records
// a new operation with the edited arguments, approved by the editor (who
// saw exactly them) and judged by the policy again (its deny rules; its
// quorum, which the editor's approval counts towards), and rejects the
// original, linking both ways. All in one transaction, with the original
// locked: the same edit repeated is a replay, another edit of the same
// original a conflict.
func (l *Ledger) ApproveEdited(ctx context.Context, a Actor, in ApproveInput, edited *structpb.Struct) (EditResult, error) {
	if err := checkID(in.OperationID); err != nil {
		return EditResult{}, err
	}
	if err := storable("reason", in.Reason); err != nil {
		return EditResult{}, err
	}
	if in.Decision != DecisionApprove {
		return EditResult{}, &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: "edited_args",
			Message: "edited_args go with DECISION_APPROVE only: deny the operation as it is"}
	}
	var res EditResult
	err := l.store.InTx(ctx, func(c *store.Conn) error {
		res = EditResult{}
		op, err := c.OperationGetForUpdate(ctx, a.Tenant, in.OperationID)
		if errors.Is(err, store.ErrNotFound) {
			return notFound(in.OperationID)
		}
		if err != nil {
			return err
		}
		b, err := l.toolOf(op)
		if err != nil {
			return err
		}
		t := b.tool
		canonical, err := l.checkArgs(t, edited, "edited_args")
		if err != nil {
			return err
		}
		if op.PreparedBy == a.ID {
			return refuse(opledgerv1.ErrorReason_ERROR_REASON_SELF_APPROVAL_FORBIDDEN,
				"the principal that prepared an operation cannot approve it, edited or not")
		}
		if in.Fingerprint != op.Fingerprint {
			return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_FINGERPRINT_MISMATCH, Field: "fingerprint",
				Message: "the fingerprint is not this operation's: what you were shown is not what would run; nothing changed"}
		}
		if op.SupersededBy != "" {
			return replayEdit(ctx, c, op, canonical, &res)
		}
		if State(op.State) != StateAwaitingApproval {
			return refuse(opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_NOT_APPLICABLE,
				"only an operation awaiting a decision can be approved with edits (state %s)", op.State)
		}
		if err := editable(t, op.Args, canonical); err != nil {
			return err
		}
		for _, e := range ApprovalsOf(op.Approvals) {
			if e.PrincipalID == a.ID {
				return refuse(opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_CONFLICT,
					"you approved this operation as it is; another approver may edit it")
			}
		}
		preparer, err := l.preparer(ctx, c, op)
		if err != nil {
			return err
		}
		j, err := judge(t, preparer, edited)
		if err != nil {
			return err // a deny rule holds for the edit: nothing changed
		}
		fp, err := fingerprint.OfCanonical(prepareMethod, op.Tenant, t.Name, t.Version, canonical)
		if err != nil {
			return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: "edited_args", Message: err.Error()}
		}
		// The editor's approval is the first of the new operation's quorum:
		// it needs approval (the editor gave one) even where the policy
		// would not ask for it for these arguments.
		needed := int32(max(j.Needed, 1))
		rule := j.Rule
		if rule == "" {
			rule = "approval.edited"
		}
		state := StateReady
		if needed > 1 {
			state = StateAwaitingApproval
		}
		now, err := c.ClockNow(ctx)
		if err != nil {
			return err
		}
		entry, _ := json.Marshal([]ApprovalEntry{{PrincipalID: a.ID, PrincipalName: a.Name, Decision: DecisionApprove,
			DecidedAt: now.UTC(), Fingerprint: fp, Reason: in.Reason, PolicyDigest: t.Policy.Digest}})
		key := "edit-of-" + op.ID
		id := newID("op_")
		ttl := t.Approval.TTL
		if ttl == 0 {
			ttl = op.ApprovalTTL
		}
		n := store.NewOperation{
			ID: id, Tenant: op.Tenant, Tool: t.Name, ToolVersion: t.Version, IdempotencyKey: key,
			Args: canonical, Fingerprint: fp, State: string(state), PreparedBy: op.PreparedBy,
			ApprovalRequired: true, ApprovalTTL: ttl, ApprovalsNeeded: needed, ApprovalRule: rule, PolicyDigest: t.Policy.Digest,
			DownstreamKey: l.keys.key(op.Tenant, t.Name, key, fp),
			Approvals:     entry, Supersedes: op.ID, ApprovedBy: a.ID, ApprovedReason: in.Reason,
			Actor: a.Name, Detail: fmt.Sprintf("approved with edits of %s by %s (%s)", op.ID, a.Name, changed(op.Args, canonical)),
			Notify: l.notifyOn() && state == StateAwaitingApproval,
		}
		if err := Check("", EventPrepared, state); err != nil {
			return err
		}
		// The original first: rejecting it releases its budget shares and its
		// business identity, which the edit then reserves for itself.
		st, err := l.decision(op, EventSuperseded, StateRejected, ByApprover)
		if err != nil {
			return err
		}
		st.Decision, st.DecidedBy, st.DecidedByName, st.ApprovedFingerprint = DecisionDeny, a.ID, a.Name, in.Fingerprint
		st.Reason, st.Actor, st.SupersededBy, st.ShownArgs = in.Reason, a.Name, id, op.Args
		st.Detail = fmt.Sprintf("approved with edits by %s: superseded by %s", a.Name, id)
		orig, err := c.OperationDecide(ctx, st)
		if err != nil {
			return err
		}
		if needsIdentityOrBudget(t) {
			adm, err := l.admitIn(ctx, c, t, preparer, edited, id, key)
			if err != nil {
				return err
			}
			n.BudgetNames, n.BudgetScopes, n.Identity = adm.names, adm.scopes, adm.identity
			// Past an `over: approve` limit the edit needs the approval it has.
		}
		newOp, inserted, err := c.OperationInsert(ctx, n)
		if err != nil {
			return err
		}
		if !inserted {
			return fmt.Errorf("ledger: the edit of %s conflicts with an operation already stored", op.ID)
		}
		res.Original, res.Edited = orig, newOp
		return nil
	})
	if err != nil {
		return EditResult{}, storeErr(err)
	}
	if !res.Replayed {
		l.obs.Decided(res.Original.Tool, DecisionApprove, res.Original.ApprovalDecidedAt.Sub(res.Original.CreatedAt))
		if State(res.Edited.State) == StateAwaitingApproval && l.notifyOn() {
			l.kickNotifier()
		}
	}
	return res, nil
}

// replayEdit answers an edit of an operation already superseded: the same
// edited arguments are a replay, others a conflict.
func replayEdit(ctx context.Context, c *store.Conn, op Operation, canonical []byte, res *EditResult) error {
	edited, err := c.OperationGet(ctx, op.Tenant, op.SupersededBy)
	if err != nil {
		return err
	}
	if !bytes.Equal(jsonCanonical(edited.Args), canonical) {
		return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_APPROVAL_CONFLICT,
			Message:  fmt.Sprintf("the operation was already approved with other edits, as %s; decide on that one", edited.ID),
			Metadata: map[string]string{"superseded_by": edited.ID}}
	}
	*res = EditResult{Original: op, Edited: edited, Replayed: true}
	return nil
}

// jsonCanonical is stored args in the canonical form Prepare computed
// (jsonb's own form may order keys differently).
func jsonCanonical(stored []byte) []byte {
	var s structpb.Struct
	if protojson.Unmarshal(stored, &s) != nil {
		return stored
	}
	b, err := fingerprint.Canonicalize(&s)
	if err != nil {
		return stored
	}
	return b
}

// topLevel decodes an args object into its fields' canonical JSON.
func topLevel(b []byte) map[string]string {
	var s structpb.Struct
	out := map[string]string{}
	if protojson.Unmarshal(b, &s) != nil {
		return out
	}
	for k, v := range s.GetFields() {
		c, err := fingerprint.Canonicalize(&structpb.Struct{Fields: map[string]*structpb.Value{"v": v}})
		if err == nil {
			out[k] = string(c)
		}
	}
	return out
}

// diff lists the top-level fields whose values differ between two args
// objects, sorted.
func diff(a, b []byte) []string {
	fa, fb := topLevel(a), topLevel(b)
	var out []string
	for k, v := range fa {
		if w, ok := fb[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// editable refuses an edit that changes a field the policy does not list
// as editable, or changes nothing.
func editable(t *tool.Tool, original, edited []byte) error {
	fields := diff(original, edited)
	if len(fields) == 0 {
		return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: "edited_args",
			Message: "edited_args are the operation's own arguments: approve without edited_args"}
	}
	var bad []Violation
	for _, f := range fields {
		if !slices.Contains(t.Approval.Editable, f) {
			bad = append(bad, Violation{Field: "edited_args/" + f, Description: "not editable"})
		}
	}
	if len(bad) > 0 {
		allowed := "none"
		if len(t.Approval.Editable) > 0 {
			allowed = strings.Join(t.Approval.Editable, ", ")
		}
		return &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_ARGS_INVALID, Field: "edited_args",
			Message:    fmt.Sprintf("%s@%s lets an approver edit only: %s", t.Name, t.Version, allowed),
			Violations: bad}
	}
	return nil
}

// changed says which fields an edit changed, for the event log (names
// only: values are arguments, never logged).
func changed(original, edited []byte) string {
	return "changed: " + strings.Join(diff(original, edited), ", ")
}
