package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
)

// refundTools is a tools file with docs/policy.md's refund example (no
// approval below 50 EUR, one approver up to 1,000 EUR, two above, EUR
// only), an approver may edit the amount, and no refund above 5,000 EUR.
var refundTools = []byte(`tools:
  - name: refund
    version: "1"
    effect: side_effect
    deny:
      - name: eur_only
        when: args.currency != "EUR"
        message: refunds are paid in EUR only
      - name: at_most_5000
        when: args.amount_minor > 500000
        message: a refund is at most 5,000 EUR
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
`)

func (w *world) refund(t *testing.T, invoice string, amount int) *opledgerv1.Operation {
	t.Helper()
	return w.prepareAs(t, w.agent, "refund", invoice, amount)
}

// editForm reads the approve-with-edit form of an operation page: its
// hidden fields and the prefilled value of each argument.
func (b *browser) editForm(id string) (url.Values, string) {
	b.t.Helper()
	status, page := b.get("/operations/" + id)
	require.Equal(b.t, http.StatusOK, status)
	require.Contains(b.t, page, `class="edit"`, "the page offers the edit form")
	form := url.Values{"csrf": {field(b.t, page, "csrf")}, "fingerprint": {field(b.t, page, "fingerprint")}}
	for _, m := range regexp.MustCompile(`name="(arg:[^"]+)" type="\w+"(?: step="\w+")? value="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		form.Set(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return form, page
}

// TestQuorumShown: an operation that needs two approvers shows why (the
// rule and its expression), how many, the policy digest it was judged
// under, and the quorum's progress with each approval's principal, in the
// list ("1/2") and on its page ("1 of 2 approvals"); the first approver is
// told it awaits another and is offered no second decision.
func TestQuorumShown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: refundTools})
	op := w.refund(t, "INV-quorum", 250000)
	require.EqualValues(t, 2, op.GetApproval().GetApprovalsNeeded())
	digest := op.GetPolicyDigest()
	require.Len(t, digest, 64)

	alice := w.browser(t)
	_, page := alice.signIn(w.approver)
	require.Contains(t, page, "0/2 approvals")
	status, page := alice.get("/operations/" + op.GetId())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "these arguments meet the tool&#39;s approval.when rule: <code>args.amount_minor &gt;= 5000</code>")
	require.Contains(t, page, "(rule <code>approval.when</code>)")
	require.Contains(t, page, "2 distinct approvers, none the one that prepared it: <code>args.amount_minor &gt; 100000 ? 2 : 1</code>")
	require.Contains(t, page, "<b>0 of 2 approvals</b>")
	require.Contains(t, page, `<code title="`+digest+`">`+digest[:12]+`</code>`, "the short digest, the full one on hover")
	require.Contains(t, page, `<code class="fp">`+digest+`</code>`, "and in the details")
	require.Contains(t, page, "the policy in force on this server")
	require.Contains(t, page, "The policy in force: refused when")

	form := alice.decisionForm(op.GetId())
	form.Set("decision", "approve")
	form.Set("reason", "checked the invoice")
	status, page = alice.post("/operations/"+op.GetId()+"/decision", form)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Approved: your approval is recorded. It has 1 of 2 approvals: the agent may execute it only once 1 more approver approves it.")
	require.NotContains(t, page, "The agent may now execute it")
	require.Contains(t, page, "<b>1 of 2 approvals</b>")
	require.Regexp(t, `<li><b>alice</b> <code class="muted">[^<]+</code> · approve · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · <span class="reason">checked the invoice</span></li>`, page)
	require.Contains(t, page, "You approved it (1 of 2 approvals): another approver must approve it too.")
	require.NotContains(t, page, `class="decision"`, "a second decision by the same approver would count for nothing")
	require.NotContains(t, page, `class="edit"`)
	require.NotContains(t, page, "<dt>Decision</dt>", "one approval of two is not the operation's decision")
	_, page = alice.get("/")
	require.Contains(t, page, "1/2 approvals</span> <span class=\"muted small\">you approved</span>")
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)

	bob := w.browser(t)
	_, page = bob.signIn(namedKey(t, w.env, "bob", ledger.RoleApprover))
	require.Contains(t, page, "1/2 approvals")
	require.NotContains(t, page, "you approved")
	form = bob.decisionForm(op.GetId())
	form.Set("decision", "approve")
	status, page = bob.post("/operations/"+op.GetId()+"/decision", form)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Approved. The agent may now execute it, until the approval expires.")
	require.Contains(t, page, "<b>2 of 2 approvals</b>")
	require.Contains(t, page, "<li><b>bob</b>")
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_READY)
	w.requireLogsClean(t)
}

// TestApproveWithEditForm: the edit form offers only the editable amount,
// typed as the number it is and prefilled; what it refuses changes nothing
// and is said like the console's other refusals; an edit lands on the new
// operation (the edited amount, what changed, the link to the original,
// the preparer's name), the original links to it, and the agent's Execute
// charges the edited amount once.
func TestApproveWithEditForm(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: refundTools})
	op := w.refund(t, "INV-edit", 6000)
	b := w.browser(t)
	b.signIn(w.approver)
	form, page := b.editForm(op.GetId())
	require.Contains(t, page, `name="arg:amount_minor" type="number" step="1" value="6000" required>`)
	require.NotContains(t, page, `name="arg:currency"`, "only the editable fields")
	require.NotContains(t, page, `name="arg:invoice_id"`)
	require.Equal(t, "6000", form.Get("arg:amount_minor"))
	require.Contains(t, page, "minor units: EUR 60.00")
	edit := func(f url.Values) (int, string) { return b.post("/operations/"+op.GetId()+"/edit", f) }
	with := func(kv ...string) url.Values {
		f := url.Values{}
		for key, vs := range form {
			f[key] = vs
		}
		for i := 0; i < len(kv); i += 2 {
			f.Set(kv[i], kv[i+1])
		}
		return f
	}

	for _, c := range []struct {
		name   string
		form   url.Values
		status int
		says   []string
	}{
		{"a field that is not editable", with("arg:currency", "USD"), http.StatusBadRequest,
			[]string{"The edited arguments were not accepted", "lets an approver edit only: amount_minor", "currency: not editable", "ARGS_INVALID"}},
		{"nothing changed", form, http.StatusBadRequest, []string{"You changed nothing"}},
		{"not a number", with("arg:amount_minor", "4O00"), http.StatusBadRequest, []string{"amount_minor must be a number"}},
		{"not a whole number, against the schema", with("arg:amount_minor", "4000.5"), http.StatusBadRequest,
			[]string{"the edited arguments do not match the schema", "ARGS_INVALID"}},
		{"a field the operation does not have", with("arg:amount_minor", "4000", "arg:memo", "x"), http.StatusBadRequest,
			[]string{"memo is not among the operation&#39;s arguments"}},
		{"a deny rule holds for the edit", with("arg:amount_minor", "600000"), http.StatusForbidden,
			[]string{"The tool&#39;s policy refuses it", "a refund is at most 5,000 EUR", "POLICY_DENIED", "Nothing changed."}},
		{"a fingerprint the operation does not have", with("arg:amount_minor", "4000", "fingerprint", "v1:"+strings.Repeat("0", 64)),
			http.StatusConflict, []string{"The arguments are not the ones you reviewed", "APPROVAL_FINGERPRINT_MISMATCH"}},
		{"without the CSRF token", with("arg:amount_minor", "4000", "csrf", ""), http.StatusForbidden,
			[]string{"security token is missing or stale"}},
	} {
		status, page := edit(c.form)
		require.Equal(t, c.status, status, c.name)
		for _, s := range c.says {
			require.Contains(t, page, s, c.name)
		}
		w.requireState(t, op.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)
	}

	// Self-approval: the preparer (an agent that is also an approver) is
	// offered no form, and a post of one is refused.
	both := w.env.Key("demo", "agent", "approver")
	own := w.prepareAs(t, both, "refund", "INV-own", 6000)
	self := w.browser(t)
	self.signIn(both)
	status, page := self.get("/operations/" + own.GetId())
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, page, `class="edit"`)
	status, page = self.post("/operations/"+own.GetId()+"/edit", url.Values{"csrf": {field(t, page, "csrf")},
		"fingerprint": {own.GetFingerprint()}, "arg:amount_minor": {"4000"}})
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, page, "SELF_APPROVAL_FORBIDDEN")
	w.requireState(t, own.GetId(), opledgerv1.State_STATE_AWAITING_APPROVAL)

	// The edit.
	f := with("arg:amount_minor", "4000")
	f.Set("reason", "40 EUR, as agreed with the customer")
	status, page = edit(f)
	require.Equal(t, http.StatusOK, status, page)
	newID := strings.TrimPrefix(b.last.Request.URL.Path, "/operations/")
	require.NotEqual(t, op.GetId(), newID)
	require.Contains(t, page, "Approved with your edits: this is the new operation")
	require.Contains(t, page, "The agent may now execute it, until the approval expires.")
	require.Contains(t, page, `<span class="v number">4000</span> <span class="note">minor units: EUR 40.00</span>`)
	require.Contains(t, page, `An edit of <a href="/operations/`+op.GetId()+`">`)
	require.Contains(t, page, `<span class="v was">6000</span> <span class="note">minor units: EUR 60.00</span> → <span class="v now">4000</span>`)
	require.Regexp(t, `<dt>Prepared by</dt><dd>invoice-agent <code`, page, "the agent prepared it; alice edited it")
	require.Contains(t, page, "<b>1 of 1 approval</b>")
	require.Contains(t, page, "<li><b>alice</b>")
	require.NotContains(t, page, `class="edit"`)
	edited := w.get(t, newID)
	require.Equal(t, opledgerv1.State_STATE_READY, edited.GetState())
	require.Equal(t, op.GetId(), edited.GetSupersedes())
	require.EqualValues(t, 4000, edited.GetArgs().AsMap()["amount_minor"])
	require.Equal(t, op.GetArgs().AsMap()["invoice_id"], edited.GetArgs().AsMap()["invoice_id"], "only the edited field changed")

	// The same edit again (a double submit) lands on the same operation;
	// another is a conflict, and the original's page links to its edit.
	status, _ = edit(f)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "/operations/"+newID, b.last.Request.URL.Path)
	status, page = edit(with("arg:amount_minor", "3000"))
	require.Equal(t, http.StatusConflict, status)
	require.Contains(t, page, "APPROVAL_CONFLICT")
	require.Contains(t, page, `Superseded by <a href="/operations/`+newID+`">`)
	status, page = b.get("/operations/" + op.GetId())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `Superseded by <a href="/operations/`+newID+`"><code>`+newID+`</code></a>, approved with edits by alice at `)
	require.NotContains(t, page, `class="decision"`)
	w.requireState(t, op.GetId(), opledgerv1.State_STATE_REJECTED)

	_, err := w.srv.Client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	require.Equal(t, "OPERATION_SUPERSEDED", reasonOf(err))
	res, err := w.srv.Client.Execute(harness.Ctx(w.agent, ""), &opledgerv1.ExecuteRequest{OperationId: newID})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, res.GetOperation().GetState())
	require.Equal(t, 1, w.charges("INV-edit"))
	for _, c := range w.env.Fakepay.Charges() {
		if c.InvoiceID == "INV-edit" {
			require.EqualValues(t, 4000, c.AmountMinor)
		}
	}
	w.requireLogsClean(t, "as agreed with the customer") // a form value; digits could be in a log line's time
}

// reasonOf is the ErrorInfo reason of a gRPC error.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// TestEditIntoQuorum: an edit into two-approver territory is judged by the
// policy again: the new operation awaits a second approver, the editor is
// told so and offered nothing more, and another approver completes it.
func TestEditIntoQuorum(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: refundTools})
	op := w.refund(t, "INV-edit-up", 6000)
	b := w.browser(t)
	b.signIn(w.approver)
	form, _ := b.editForm(op.GetId())
	form.Set("arg:amount_minor", "150000")
	status, page := b.post("/operations/"+op.GetId()+"/edit", form)
	require.Equal(t, http.StatusOK, status)
	newID := strings.TrimPrefix(b.last.Request.URL.Path, "/operations/")
	require.Contains(t, page, "Approved with your edits")
	require.Contains(t, page, "It has 1 of 2 approvals: the agent may execute it only once 1 more approver approves it.")
	require.Contains(t, page, "You approved it (1 of 2 approvals)")
	require.NotContains(t, page, `class="decision"`)
	_, page = b.get("/")
	require.Contains(t, page, "1/2 approvals")
	require.Contains(t, page, "edit of <code>"+op.GetId()+"</code>")

	bob := w.browser(t)
	bob.signIn(namedKey(t, w.env, "bob", ledger.RoleApprover))
	edit, page := bob.editForm(newID)
	require.Equal(t, "150000", edit.Get("arg:amount_minor"), "an edit may be edited again by another approver")
	require.Contains(t, page, `<span class="v was">6000</span>`, "the second approver sees what the edit changed")
	f := bob.decisionForm(newID)
	f.Set("decision", "approve")
	status, page = bob.post("/operations/"+newID+"/decision", f)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "<b>2 of 2 approvals</b>")
	w.requireState(t, newID, opledgerv1.State_STATE_READY)
}

// TestEditedArgsKeepUnchangedValues: a field the form sends back as shown
// keeps its stored value exactly; a boolean and a text are read as what
// they replace.
func TestEditedArgsKeepUnchangedValues(t *testing.T) {
	t.Parallel()
	tools := []byte(strings.Replace(string(refundTools), "editable: [amount_minor]", "editable: [amount_minor, note, rush, meta]", 1))
	tools = []byte(strings.Replace(string(tools), "        currency: {type: string}\n",
		"        currency: {type: string}\n        note: {type: string}\n        rush: {type: boolean}\n        meta: {type: object}\n", 1))
	w := newWorld(t, harness.Options{ToolsYAML: tools})
	args, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-kinds", "amount_minor": 6000, "currency": "EUR",
		"note": "line one\nline two", "rush": false, "meta": map[string]any{"k": "v"}})
	require.NoError(t, err)
	resp, err := w.srv.Client.Prepare(harness.Ctx(w.agent, "key-kinds"), &opledgerv1.PrepareRequest{Tool: "refund", Args: args})
	require.NoError(t, err)
	op := resp.GetOperation()

	b := w.browser(t)
	b.signIn(w.approver)
	_, page := b.editForm(op.GetId())
	require.Contains(t, page, "<select id=\"edit-2\" name=\"arg:rush\"><option>true</option><option selected>false</option></select>")
	require.Contains(t, page, "name=\"arg:note\" rows=\"3\" spellcheck=\"false\">\nline one\nline two</textarea>")
	require.Contains(t, page, "Also editable, but not in this form: meta")
	form := url.Values{"csrf": {field(t, page, "csrf")}, "fingerprint": {op.GetFingerprint()},
		"arg:amount_minor": {"6000"}, "arg:note": {"line one\r\nline two"}, "arg:rush": {"yes"}}
	status, page := b.post("/operations/"+op.GetId()+"/edit", form)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, page, "rush must be true or false")
	form.Set("arg:rush", "true")
	status, page = b.post("/operations/"+op.GetId()+"/edit", form)
	require.Equal(t, http.StatusOK, status, page)
	edited := w.get(t, strings.TrimPrefix(b.last.Request.URL.Path, "/operations/")).GetArgs().AsMap()
	require.Equal(t, true, edited["rush"])
	require.Equal(t, "line one\nline two", edited["note"], "the text area's CRLF is the stored text")
	require.EqualValues(t, 6000, edited["amount_minor"])
	require.Equal(t, map[string]any{"k": "v"}, edited["meta"])
}

// TestBudgetsShown: the operation page says which limits an operation
// counts against and how much of each is used, and its business identity.
func TestBudgetsShown(t *testing.T) {
	t.Parallel()
	tools := strings.Replace(string(refundTools), "    args_schema:", "    identity: {key: args.invoice_id, window: 720h}\n    args_schema:", 1) +
		"limits:\n  - {name: refunds_per_invoice, tools: [refund], per: args.invoice_id, window: 1h, count: 3}\n" +
		"  - {name: daily_total, tools: [refund], window: 24h, sum: args.amount_minor, max: 100000}\n"
	w := newWorld(t, harness.Options{ToolsYAML: []byte(tools)})
	op := w.refund(t, "INV-budget", 6000)
	alice := w.browser(t)
	alice.signIn(w.approver)
	status, page := alice.get("/operations/" + op.GetId())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "<b>daily_total</b>: 6000 of 100000 (args.amount_minor) within 24 h 0 min")
	require.Contains(t, page, "<b>refunds_per_invoice</b> for <code>INV-budget</code>: 1 of 3 operations within 1 h 0 min")
	require.Contains(t, page, "the oldest leaves the window in")
	require.Contains(t, page, `<dd id="identity"><code>INV-budget</code>`)
}
