package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/tool"
)

// The policy parts of the operation page (docs/console.md, "Policies"): why
// the operation needs approval, the quorum's progress, the policy it was
// judged under, the links of an approve-with-edit, and the form that makes
// one.

// policyView is why an operation needs approval and the policy it was
// judged under, as the page says them.
type policyView struct {
	// Rule is the rule that demanded the approval, as recorded
	// ("approval.when"); Why says it in words and Expr is its CEL text when
	// the server holds the policy the operation was judged under.
	Rule, Why, Expr string
	// Quorum says how many approvers; QuorumExpr is the CEL expression
	// that counted them, when the server holds that policy.
	Quorum, QuorumExpr string
	// Digest is the policy digest, Short its first 12 characters.
	Digest, Short string
	// Current: the operation was judged under the policy this server holds
	// for the tool version; Configured: the server holds the tool version.
	Current, Configured bool
	// Standing says whether that policy is the one in force.
	Standing string
	// Summary is the policy in force in plain words (tool.Summary).
	Summary string
}

// policyOf describes op's policy; t is its tool version as this server
// holds it, or nil.
func policyOf(op ledger.Operation, t *tool.Tool) policyView {
	p := policyView{Rule: op.ApprovalRule, Digest: op.PolicyDigest, Short: shortDigest(op.PolicyDigest), Configured: t != nil}
	if t != nil {
		p.Current = t.Policy.Digest == op.PolicyDigest
		p.Summary = t.Summary()
	}
	state := ledger.State(op.State)
	switch {
	case p.Current:
		p.Standing = "the policy in force on this server"
	case t == nil:
		p.Standing = "the tool version is no longer configured on this server"
	case state == ledger.StateAwaitingApproval, state == ledger.StateReady && op.FirstSentFence == 0:
		p.Standing = "an earlier policy: the one in force judges it again at the next decision and before it is sent"
	default:
		p.Standing = "an earlier policy than the one in force now"
	}
	switch op.ApprovalRule {
	case "":
		if op.ApprovalRequired {
			p.Why = "the tool version requires approval"
		}
	case "approval.required":
		p.Why = "every call of this tool version needs approval"
	case "approval.when":
		p.Why = "these arguments meet the tool's approval.when rule"
		if p.Current && t.Approval.When != "" {
			p.Expr = t.Approval.When
		}
	case "approval.edited":
		p.Why = "an approver edited the arguments: their approval is recorded, though the policy asks for none for these arguments"
	default:
		p.Why = "a rule of the tool's policy"
		if name, ok := strings.CutPrefix(op.ApprovalRule, "limits."); ok {
			p.Why = "the call goes past the budget " + name + ", whose over: approve asks for an approval then"
		}
	}
	if n := op.ApprovalsNeeded; n > 0 {
		p.Quorum = "1 approver, not the one that prepared it"
		if n > 1 {
			p.Quorum = fmt.Sprintf("%d distinct approvers, none the one that prepared it", n)
		}
		if p.Current && op.ApprovalRule != "approval.edited" {
			p.QuorumExpr = t.Approval.ApproversExpr
		}
	}
	return p
}

func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// quorumView is the current round's decisions and the number needed.
type quorumView struct {
	Needed int32
	// Have counts the approvals of the round.
	Have      int
	Decisions []decisionView
	// Mine: the reader approved in this round (the operation awaits others).
	Mine bool
}

type decisionView struct {
	Name, ID, At, Decision, Reason string
}

// Progress is "1 of 2 approvals".
func (q quorumView) Progress() string {
	word := "approvals"
	if q.Needed == 1 {
		word = "approval"
	}
	return fmt.Sprintf("%d of %d %s", q.Have, q.Needed, word)
}

// Short is "1/2", for the list.
func (q quorumView) Short() string { return fmt.Sprintf("%d/%d", q.Have, q.Needed) }

// Pending: some approvals of the quorum are in, not all.
func (q quorumView) Pending() bool { return q.Have > 0 && q.Have < int(q.Needed) }

// Missing is how many approvals the quorum still lacks.
func (q quorumView) Missing() int { return max(int(q.Needed)-q.Have, 0) }

// Remaining says what the quorum still needs.
func (q quorumView) Remaining() string {
	who := "1 more approver approves"
	if n := q.Missing(); n != 1 {
		who = fmt.Sprintf("%d more approvers approve", n)
	}
	return fmt.Sprintf("It has %s: the agent may execute it only once %s it.", q.Progress(), who)
}

// quorumOf reads op's approvals; reader is the principal looking at it.
func quorumOf(op ledger.Operation, reader string) quorumView {
	q := quorumView{Needed: op.ApprovalsNeeded}
	for _, e := range ledger.ApprovalsOf(op.Approvals) {
		name, _ := visible(e.PrincipalName)
		reason, _ := visible(e.Reason)
		d := decisionView{Name: name, ID: e.PrincipalID, At: stamp(e.DecidedAt), Decision: strings.ToLower(e.Decision), Reason: reason}
		if op.SupersededBy != "" && e.Decision == ledger.DecisionDeny {
			// An approve-with-edit rejects the original as a denial.
			d.Decision = "approve with edits (superseded)"
		}
		q.Decisions = append(q.Decisions, d)
		if e.Decision == ledger.DecisionApprove {
			q.Have++
			q.Mine = q.Mine || e.PrincipalID == reader && ledger.State(op.State) == ledger.StateAwaitingApproval
		}
	}
	return q
}

// editView is the approve-with-edit form: one input per editable argument
// of a kind a form can carry (number, string, boolean), prefilled with the
// operation's value.
type editView struct {
	Fields []editField
	// Elsewhere lists editable arguments the form cannot carry (objects,
	// arrays, null, absent): Approve with edited_args changes them.
	Elsewhere []string
	// Allowed lists the tool's editable fields.
	Allowed string
}

type editField struct {
	// Name is the argument's key; Label the key as the page shows it.
	Name, Label string
	// Kind is number, string or boolean: the original value's JSON type,
	// which the posted value is read as.
	Kind string
	// Value is the prefilled value: the stored number as written, the text,
	// "true" or "false"; Shown is it as the page shows a value (invisible
	// characters as escapes).
	Value, Shown string
	// Note explains the current value ("minor units: EUR 49.00").
	Note string
	// Integer: the value is a whole number (the input steps by 1).
	Integer bool
	// Multiline: a text with line breaks, edited in a text area (an input
	// would drop them).
	Multiline bool
	// Hidden: the text holds characters a person cannot see.
	Hidden bool
}

// editFormOf is op's edit form under t, or nil when t lets nothing be
// edited.
func editFormOf(op ledger.Operation, t *tool.Tool, fields []Field) *editView {
	if t == nil || len(t.Approval.Editable) == 0 {
		return nil
	}
	args, err := decodeArgs(op.Args)
	if err != nil {
		return nil
	}
	e := &editView{Allowed: strings.Join(t.Approval.Editable, ", ")}
	for _, name := range t.Approval.Editable {
		label, hidden := segment("", name)
		f := editField{Name: name, Label: label, Hidden: hidden}
		switch v := args[name].(type) {
		case json.Number:
			f.Kind, f.Value = "number", v.String()
			_, err := strconv.ParseInt(v.String(), 10, 64)
			f.Integer = err == nil
		case string:
			f.Kind, f.Value, f.Multiline = "string", v, strings.ContainsAny(v, "\r\n")
			_, h := visible(v)
			f.Hidden = f.Hidden || h
		case bool:
			f.Kind, f.Value = "boolean", strconv.FormatBool(v)
		default:
			e.Elsewhere = append(e.Elsewhere, label)
			continue
		}
		f.Shown = f.Value
		for _, row := range fields {
			if row.Path == label {
				f.Note, f.Shown = row.Note, row.Value
			}
		}
		e.Fields = append(e.Fields, f)
	}
	if len(e.Fields) == 0 {
		return nil
	}
	return e
}

// editPrefix names a form field that carries an edited argument.
const editPrefix = "arg:"

// jsonNumber is the grammar of a JSON number: what a number field accepts.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// editedArgs is op's arguments with the form's edited fields replaced, each
// read as the type of the value it replaces; a field whose posted value is
// the one the form showed keeps the stored value exactly. It reports
// whether anything changed; a refusal is a problem for the page.
func editedArgs(op ledger.Operation, form url.Values) (*structpb.Struct, bool, *problem) {
	var args structpb.Struct
	if err := protojson.Unmarshal(op.Args, &args); err != nil {
		return nil, false, &problem{Title: "The form was not accepted", Detail: "The operation's stored arguments could not be read."}
	}
	stored, _ := decodeArgs(op.Args)
	bad := func(format string, a ...any) (*structpb.Struct, bool, *problem) {
		return nil, false, &problem{Title: "The edited arguments were not accepted", Detail: fmt.Sprintf(format, a...) + " Nothing changed."}
	}
	var names []string
	for k := range form {
		if name, ok := strings.CutPrefix(k, editPrefix); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	changed := false
	for _, name := range names {
		label, _ := segment("", name)
		posted := form.Get(editPrefix + name)
		if !utf8.ValidString(posted) {
			return bad("The value of %s is not valid text.", label)
		}
		var v *structpb.Value
		switch orig := stored[name].(type) {
		case json.Number:
			s := strings.TrimSpace(posted)
			if s == orig.String() {
				continue
			}
			f, err := strconv.ParseFloat(s, 64)
			if !jsonNumber.MatchString(s) || err != nil || math.IsInf(f, 0) {
				return bad("%s must be a number, like the value it replaces (%s).", label, orig)
			}
			v = structpb.NewNumberValue(f)
		case string:
			if strings.ContainsAny(orig, "\r\n") {
				// A text area sends its line breaks as CRLF.
				posted = strings.ReplaceAll(posted, "\r\n", "\n")
				if posted == strings.ReplaceAll(orig, "\r\n", "\n") {
					continue
				}
			}
			if posted == orig {
				continue
			}
			v = structpb.NewStringValue(posted)
		case bool:
			if posted != "true" && posted != "false" {
				return bad("%s must be true or false, like the value it replaces.", label)
			}
			b := posted == "true"
			if b == orig {
				continue
			}
			v = structpb.NewBoolValue(b)
		case nil:
			if _, present := stored[name]; !present {
				return bad("%s is not among the operation's arguments.", label)
			}
			return bad("%s holds null, which the console cannot edit: use Approve with edited_args.", label)
		default:
			return bad("%s holds an object or a list, which the console cannot edit: use Approve with edited_args.", label)
		}
		args.Fields[name] = v
		changed = true
	}
	return &args, changed, nil
}

// edit approves the operation "the same, but with these arguments"
// (ledger.ApproveEdited): a new operation with the edited arguments,
// approved by the reader and judged by the policy again; the original is
// superseded. It answers with the new operation's page.
func (c *Console) edit(w http.ResponseWriter, r *http.Request, s session) {
	if !s.approver() {
		c.message(w, r, http.StatusForbidden, "Approvers only", "Your key does not hold the approver role. Nothing changed.")
		return
	}
	id := r.PathValue("id")
	if !ledger.ValidOperationID(id) {
		c.message(w, r, http.StatusNotFound, "No such operation", "There is no such operation in your tenant.")
		return
	}
	f := r.PostForm
	if utf8.RuneCountInString(f.Get("reason")) > 1000 {
		c.showOperation(w, r, s, http.StatusBadRequest, "", &problem{Title: "The form was not accepted",
			Detail: "Write a reason of at most 1000 characters."})
		return
	}
	op, _, err := c.l.Get(r.Context(), s.actor, id, false)
	if err != nil {
		c.failed(w, r, err)
		return
	}
	args, changed, p := editedArgs(op, f)
	if p == nil && !changed {
		p = &problem{Title: "You changed nothing",
			Detail: "The values sent are the operation's own. To approve it as it is, use Approve. Nothing changed."}
	}
	if p != nil {
		infoOf(r).outcome = "edit_refused"
		c.showOperation(w, r, s, http.StatusBadRequest, "", p)
		return
	}
	res, err := c.l.ApproveEdited(r.Context(), s.actor, ledger.ApproveInput{OperationID: id, Fingerprint: f.Get("fingerprint"),
		Decision: ledger.DecisionApprove, Reason: f.Get("reason")}, args)
	if err != nil {
		c.refused(w, r, s, err)
		return
	}
	infoOf(r).outcome = "approved_edited"
	http.Redirect(w, r, "/operations/"+res.Edited.ID+"?done=edited", http.StatusSeeOther)
}

// linksView is the supersede links of an approve-with-edit.
type linksView struct {
	// SupersededBy is the edit that replaced this operation, By who made it
	// and At when.
	SupersededBy, By, At string
	// Supersedes is the operation this one is an edit of, EditedBy who
	// edited it; Changes lists what the edit changed.
	Supersedes, EditedBy string
	Changes              []change
}

// change is one argument an edit changed, as the page shows both values.
type change struct {
	Path, Was, WasNote, Now, NowNote string
}

// changesOf lists the rows that differ between the original's arguments
// and the edit's.
func changesOf(was, now []Field) []change {
	before := map[string]Field{}
	for _, f := range was {
		before[f.Path] = f
	}
	var out []change
	seen := map[string]bool{}
	for _, f := range now {
		seen[f.Path] = true
		b, ok := before[f.Path]
		if ok && b.Value == f.Value && b.Kind == f.Kind {
			continue
		}
		c := change{Path: f.Path, Now: f.Value, NowNote: f.Note, Was: "(absent)"}
		if ok {
			c.Was, c.WasNote = b.Value, b.Note
		}
		out = append(out, c)
	}
	for _, b := range was {
		if !seen[b.Path] {
			out = append(out, change{Path: b.Path, Was: b.Value, WasNote: b.Note, Now: "(absent)"})
		}
	}
	return out
}

// maxEditChain bounds how many originals the page reads back to find who
// prepared an edit of an edit.
const maxEditChain = 5

// links reads what op's supersede links say: the original of an edit (its
// arguments, and who prepared the chain's first operation: an edit's own
// PREPARED event names its editor) and who superseded it. preparedBy is,
// for an edit, the name of the principal that prepared the first
// operation, or "" when it is not known.
func (c *Console) links(r *http.Request, s session, op ledger.Operation, evs []ledger.OperationEvent, fields []Field) (l linksView, preparedBy string, err error) {
	for _, e := range evs {
		switch ledger.EventKind(e.Type) {
		case ledger.EventPrepared:
			if op.Supersedes != "" {
				l.EditedBy = e.Actor
			}
		case ledger.EventSuperseded:
			l.By, l.At = e.Actor, stamp(e.CreatedAt)
		}
	}
	l.SupersededBy, l.Supersedes = op.SupersededBy, op.Supersedes
	prev := op
	for i := 0; prev.Supersedes != "" && i < maxEditChain; i++ {
		orig, oevs, err := c.l.Get(r.Context(), s.actor, prev.Supersedes, true)
		var le *ledger.Error
		if errors.As(err, &le) && le.Reason == opledgerv1.ErrorReason_ERROR_REASON_OPERATION_NOT_FOUND {
			break // pruned: the link stays, what it changed is unknown
		}
		if err != nil {
			return linksView{}, "", err
		}
		if i == 0 {
			l.Changes = changesOf(argFields(orig.Args), fields)
		}
		for _, e := range oevs {
			if e.Type == string(ledger.EventPrepared) && orig.Supersedes == "" {
				preparedBy = e.Actor
			}
		}
		prev = orig
	}
	return l, preparedBy, nil
}
