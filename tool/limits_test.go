package tool

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const limitsFile = `tools:
  - name: refund
    version: "1"
    effect: side_effect
    identity: {key: args.order_id, window: 720h}
    args_schema:
      type: object
      properties:
        order_id: {type: string}
        customer_id: {type: string}
        amount_minor: {type: integer}
        note: {type: string}
      required: [order_id, customer_id, amount_minor]
    executor: {type: http, url: "http://127.0.0.1:1/refunds"}
limits:
  - name: per_customer
    tools: [refund]
    per: args.customer_id
    window: 1h
    count: 10
  - name: daily_total
    tools: [refund]
    window: 24h
    sum: args.amount_minor
    max: 100000
`

func TestLimitsAndIdentityLoad(t *testing.T) {
	t.Parallel()
	r, err := Parse([]byte(limitsFile), nil)
	require.NoError(t, err)
	rt, _ := r.Lookup("refund", "")
	require.Len(t, rt.Limits, 2)
	require.Equal(t, "per_customer", rt.Limits[0].Name)
	require.Equal(t, time.Hour, rt.Limits[0].Window)
	require.Equal(t, OverRefuse, rt.Limits[0].Over)
	require.Equal(t, 720*time.Hour, rt.Identity.Window)
	// The same answers with the variables converted for each expression,
	// and bound once for all of them (Bind).
	unbound := RuleInput{Args: args(t, map[string]any{"order_id": "o-1", "customer_id": "c-7", "amount_minor": 2500})}
	for _, in := range []RuleInput{unbound, rt.Bind(unbound)} {
		scope, err := rt.Limits[0].Scope(rt, in)
		require.NoError(t, err)
		require.Equal(t, "c-7", scope)
		amount, err := rt.Limits[1].Amount(rt, in)
		require.NoError(t, err)
		require.EqualValues(t, 2500, amount)
		id, err := rt.Identity.Value(rt, in)
		require.NoError(t, err)
		require.Equal(t, "o-1", id)
	}

	// At call time: a negative amount, a key that does not evaluate.
	_, err = rt.Limits[1].Amount(rt, RuleInput{Args: args(t, map[string]any{"amount_minor": -5})})
	require.ErrorContains(t, err, "an amount is a number ≥ 0")
	_, err = rt.Identity.Value(rt, RuleInput{Args: args(t, map[string]any{})})
	var re *RuleError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "identity.key", re.Rule)
}

func TestLimitsLoadErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ from, to, want string }{
		{`sum: args.amount_minor`, `sum: args.note`, `limits[1] daily_total (for refund@1).sum: args.note is declared string, not a number`},
		{`sum: args.amount_minor`, `sum: args.note + "x"`, `yields string, not a number`},
		{`per: args.customer_id`, `per: args.amount_minor`, `.per: args.amount_minor is declared integer, not a string`},
		{`per: args.customer_id`, `per: args.customer`, `args has no field "customer"`},
		{`window: 1h`, `window: 0s`, `limits[0] per_customer.window: 0s is not positive`},
		{`max: 100000`, `max: -1`, `limits[1] daily_total.max: -1 is not a number ≥ 0`},
		{`tools: [refund]
    per`, `tools: [refund, payout]
    per`, `limits[0] per_customer.tools: no tool named "payout" is declared`},
		{`count: 10`, `count: 0`, `count: 0 is not between 1`},
		{`    count: 10
`, ``, `limits[0] per_customer: neither count nor sum`},
		{`    max: 100000
`, ``, `daily_total.sum: set without max`},
		{`name: daily_total
    tools: [refund]`, `name: daily_total
    over: sometimes
    tools: [refund]`, `over: "sometimes" is not refuse or approve`},
		{`name: daily_total`, `name: per_customer`, `duplicate limit name`},
		{`identity: {key: args.order_id, window: 720h}`, `identity: {key: args.amount_minor, window: 720h}`, `identity.key: args.amount_minor is declared integer, not a string`},
		{`identity: {key: args.order_id, window: 720h}`, `identity: {key: args.order_id}`, `identity.window: missing`},
		{`name: daily_total
    tools: [refund]`, `name: daily_total
    over: approve
    tools: [refund]`, `over: approve, but tool "refund" version "1" declares no approval ttl`},
	} {
		_, err := Parse([]byte(strings.Replace(limitsFile, c.from, c.to, 1)), nil)
		require.Error(t, err, c.to)
		require.Contains(t, err.Error(), c.want, c.to)
	}
}
