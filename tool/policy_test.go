package tool

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"
)

// refundTool is docs/policy.md's worked example: no approval below 50 EUR,
// one approver up to 1,000 EUR, two above, EUR only.
const refundTool = `tools:
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
        order_id: {type: string}
        amount_minor: {type: integer}
        currency: {type: string}
      required: [order_id, amount_minor, currency]
    executor:
      type: http
      url: http://127.0.0.1:1/refunds
`

func args(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	require.NoError(t, err)
	return s
}

func TestPolicyJudgesTheWorkedExample(t *testing.T) {
	t.Parallel()
	r, err := Parse([]byte(refundTool), nil)
	require.NoError(t, err)
	rt, err := r.Lookup("refund", "")
	require.NoError(t, err)
	require.Len(t, rt.Policy.Digest, 64)

	for _, c := range []struct {
		amount   float64
		currency string
		deny     string
		needed   int
		rule     string
	}{
		{4999, "EUR", "", 0, ""},
		{5000, "EUR", "", 1, "approval.when"},
		{100000, "EUR", "", 1, "approval.when"},
		{100001, "EUR", "", 2, "approval.when"},
		{4900, "USD", "eur_only", 0, ""},
	} {
		j, err := rt.Judge(RuleInput{Args: args(t, map[string]any{"order_id": "o1", "amount_minor": c.amount, "currency": c.currency}), Tenant: "t"})
		require.NoError(t, err, c)
		if c.deny != "" {
			require.NotNil(t, j.Denied, c)
			require.Equal(t, c.deny, j.Denied.Name)
			require.Equal(t, "refunds are paid in EUR only", j.Denied.Message)
			continue
		}
		require.Nil(t, j.Denied, c)
		require.Equal(t, c.needed, j.Needed, c)
		require.Equal(t, c.rule, j.Rule, c)
	}
	require.Contains(t, rt.Summary(), "refused when args.currency != \"EUR\"")
}

func TestPolicyVariables(t *testing.T) {
	t.Parallel()
	src := strings.Replace(refundTool, `when: args.currency != "EUR"`,
		`when: tool.name == "refund" && tenant == "acme" && "agent" in principal.roles && principal.name.startsWith("bot")`, 1)
	r, err := Parse([]byte(src), nil)
	require.NoError(t, err)
	rt, _ := r.Lookup("refund", "")
	a := args(t, map[string]any{"order_id": "o1", "amount_minor": 10, "currency": "EUR"})
	j, err := rt.Judge(RuleInput{Args: a, Tenant: "acme", Principal: Principal{ID: "pr_1", Name: "bot-7", Roles: []string{"agent"}}})
	require.NoError(t, err)
	require.NotNil(t, j.Denied)
	j, err = rt.Judge(RuleInput{Args: a, Tenant: "other", Principal: Principal{ID: "pr_1", Name: "bot-7", Roles: []string{"agent"}}})
	require.NoError(t, err)
	require.Nil(t, j.Denied)
}

func TestPolicyDigestChangesWithEveryRule(t *testing.T) {
	t.Parallel()
	digest := func(src string) string {
		r, err := Parse([]byte(src), nil)
		require.NoError(t, err)
		rt, _ := r.Lookup("refund", "")
		return rt.Policy.Digest
	}
	base := digest(refundTool)
	require.Equal(t, base, digest(refundTool), "the digest is a function of the rules")
	for _, edit := range [][2]string{
		{`message: refunds are paid in EUR only`, `message: EUR only`},
		{`>= 5000`, `>= 5001`},
		{`? 2 : 1`, `? 3 : 1`},
		{`ttl: 15m`, `ttl: 16m`},
		{`editable: [amount_minor]`, `editable: [currency]`},
		{`version: "1"`, `version: "2"`},
	} {
		require.NotEqual(t, base, digest(strings.Replace(refundTool, edit[0], edit[1], 1)), edit)
	}
}

// TestPolicyRuleErrorsAtCallTime: a rule that cannot be evaluated for a
// call refuses it, never allows it.
func TestPolicyRuleErrorsAtCallTime(t *testing.T) {
	t.Parallel()
	src := strings.Replace(refundTool, `when: args.currency != "EUR"`, `when: args.currency != "EUR" || args.meta.flag`, 1)
	src = strings.Replace(src, "currency: {type: string}\n", "currency: {type: string}\n        meta: {type: object}\n", 1)
	r, err := Parse([]byte(src), nil)
	require.NoError(t, err)
	rt, _ := r.Lookup("refund", "")
	_, err = rt.Judge(RuleInput{Args: args(t, map[string]any{"order_id": "o1", "amount_minor": 10, "currency": "EUR"})})
	var re *RuleError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "deny.eur_only", re.Rule)
	require.Contains(t, re.Error(), "meta")

	// The cost limit: a comprehension over a large list.
	src = strings.Replace(refundTool, `when: args.currency != "EUR"`,
		`when: args.items.all(x, args.items.all(y, x != y || x == y)) && false`, 1)
	src = strings.Replace(src, "currency: {type: string}\n", "currency: {type: string}\n        items: {type: array}\n", 1)
	r, err = Parse([]byte(src), nil)
	require.NoError(t, err)
	rt, _ = r.Lookup("refund", "")
	items := make([]any, 500)
	for i := range items {
		items[i] = float64(i)
	}
	_, err = rt.Judge(RuleInput{Args: args(t, map[string]any{"order_id": "o1", "amount_minor": 10, "currency": "EUR", "items": items})})
	require.ErrorAs(t, err, &re)
	require.Contains(t, re.Error(), "cost")

	// A quorum expression out of range.
	src = strings.Replace(refundTool, `"args.amount_minor > 100000 ? 2 : 1"`, `"args.amount_minor > 100000 ? 20 : 1"`, 1)
	r, err = Parse([]byte(src), nil)
	require.NoError(t, err)
	rt, _ = r.Lookup("refund", "")
	_, err = rt.Judge(RuleInput{Args: args(t, map[string]any{"order_id": "o1", "amount_minor": 200000, "currency": "EUR"})})
	require.ErrorAs(t, err, &re)
	require.Equal(t, "approval.approvers", re.Rule)
}

func TestPolicyLoadErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ from, to, want string }{
		{`when: args.currency != "EUR"`, `when: args.currency !=`, `tools[0] "refund" version "1": deny[0] eur_only.when: ERROR: at 1:`},
		{`when: args.currency != "EUR"`, `when: args.curency != "EUR"`, `deny[0] eur_only.when: at 1:5: args has no field "curency"`},
		{`when: args.currency != "EUR"`, `when: args["curency"] != "EUR"`, `args has no field "curency"`},
		{`when: args.currency != "EUR"`, `when: principal.email == "x"`, `principal has no field "email"`},
		{`when: args.currency != "EUR"`, `when: args.currency`, `yields dyn, not bool`},
		{`when: args.currency != "EUR"`, `when: args.amount_minor + 1`, `not bool`},
		{`when: args.currency != "EUR"`, `when: nope == 1`, `undeclared reference to 'nope'`},
		{`- name: eur_only`, `- name: "EUR only"`, `deny[0].name: "EUR only" does not match`},
		{`approvers: "args.amount_minor > 100000 ? 2 : 1"`, `approvers: 0`, `approval.approvers: 0 is not between 1 and 10`},
		{`approvers: "args.amount_minor > 100000 ? 2 : 1"`, `approvers: "args.currency"`, `approval.approvers: yields dyn, not int`},
		{`editable: [amount_minor]`, `editable: [amount]`, `approval.editable: "amount" is not a property of args_schema`},
		{`when: args.amount_minor >= 5000`, "required: true\n      when: args.amount_minor >= 5000", `required and when are exclusive`},
		{`approval:`, "approval:\n      required: false\n    unused:", `field unused not found in tool`},
	} {
		_, err := Parse([]byte(strings.Replace(refundTool, c.from, c.to, 1)), nil)
		require.Error(t, err, c.to)
		require.Contains(t, err.Error(), c.want, c.to)
	}
	// approvers without an approval rule.
	src := strings.Replace(refundTool, "      when: args.amount_minor >= 5000\n", "", 1)
	src = strings.Replace(src, "      ttl: 15m\n", "", 1)
	_, err := Parse([]byte(src), nil)
	require.ErrorContains(t, err, "approval.approvers: set without approval.required or approval.when")
}

// BenchmarkJudgeThreeRules measures what the bench's three-rule policy
// (two deny rules and an approval.when, none of which holds) adds to every
// Prepare of its tool: one Judge.
func BenchmarkJudgeThreeRules(b *testing.B) {
	reg, err := Parse([]byte(`tools:
  - name: charge
    version: "1"
    effect: side_effect
    deny:
      - name: eur_only
        when: args.currency != "EUR"
      - name: too_large
        when: args.amount_minor > 10000000
    approval:
      when: args.amount_minor > 1000000
      ttl: 15m
    args_schema:
      type: object
      properties:
        invoice_id: {type: string}
        amount_minor: {type: integer}
        currency: {type: string}
    executor:
      type: http
      url: http://127.0.0.1:1/charges
`), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	t, err := reg.Lookup("charge", "1")
	if err != nil {
		b.Fatal(err)
	}
	s, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR"})
	if err != nil {
		b.Fatal(err)
	}
	in := RuleInput{Args: s, Tenant: "bench", Principal: Principal{ID: "pr_bench", Roles: []string{"agent"}}}
	b.ReportAllocs()
	for b.Loop() {
		if j, err := t.Judge(in); err != nil || j.Denied != nil || j.Needed != 0 {
			b.Fatal(j, err)
		}
	}
}
