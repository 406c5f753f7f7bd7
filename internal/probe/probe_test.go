package probe_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/probe"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/tool"
)

const (
	payArgs     = `{"invoice_id":"PROBE-1","amount_minor":100,"currency":"EUR"}`
	invalidArgs = `{"invoice_id":"PROBE-1","amount_minor":-1,"currency":"EUR"}`
)

// processor is a fake processor on real HTTP (127.0.0.1).
func processor(t *testing.T, f fakepay.Faults) (*fakepay.Server, string) {
	t.Helper()
	// A fixed seed: the first lookups after the first effect (before any
	// concurrency) draw the same misses on every run.
	srv := fakepay.New(fakepay.Options{Seed: 1})
	srv.SetFaults(f)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return srv, ts.URL
}

// demoTool is a tool of the demo tools file (examples/tools.yaml) pointed at url.
func demoTool(t *testing.T, url, name string) *tool.Tool {
	t.Helper()
	reg, err := tool.Parse(examples.ToolsYAML, func(k string) string {
		if k == "OPLEDGER_FAKEPAY_URL" {
			return url
		}
		return ""
	})
	require.NoError(t, err)
	tl, err := reg.Lookup(name, "")
	require.NoError(t, err)
	return tl
}

// chargeTool is pay_invoice's shape with executor lines of the test's own
// after the URLs (dedupes_keys, lookup_consistent, key_retention, …).
func chargeTool(t *testing.T, url, executorLines string) *tool.Tool {
	t.Helper()
	src := `tools:
  - name: charge
    version: "1"
    effect: side_effect
    args_schema:
      type: object
      properties:
        invoice_id: {type: string, minLength: 1}
        amount_minor: {type: integer}
        currency: {type: string, pattern: "^[A-Z]{3}$"}
      required: [invoice_id, amount_minor, currency]
      additionalProperties: false
    executor:
      type: http
      url: ` + url + `/charges
      external_ref_field: id
` + executorLines
	reg, err := tool.Parse([]byte(src), nil)
	require.NoError(t, err)
	tl, err := reg.Lookup("charge", "")
	require.NoError(t, err)
	return tl
}

const lookupLines = "      lookup_url: %s/charges?idempotency_key={key}\n"

func withLookup(url string, more string) string {
	return strings.ReplaceAll(lookupLines, "%s", url) + more
}

func run(t *testing.T, tl *tool.Tool, opts probe.Options) *probe.Report {
	t.Helper()
	opts.Tool = tl
	if opts.Args == nil {
		opts.Args = json.RawMessage(payArgs)
	}
	if opts.LookupWait == 0 {
		opts.LookupWait = 500 * time.Millisecond
	}
	rep, err := probe.Run(t.Context(), opts)
	require.NoError(t, err)
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Log("\n" + text.String())
	return rep
}

// verdicts maps "declaration/case" to the verdict.
func verdicts(rep *probe.Report) map[string]probe.Verdict {
	out := map[string]probe.Verdict{}
	for _, c := range rep.Checks {
		out[c.Declaration+"/"+c.Case] = c.Verdict
	}
	return out
}

// contradicted lists the checks CONTRADICTED, as "declaration/case".
func contradicted(rep *probe.Report) []string {
	var out []string
	for _, c := range rep.Checks {
		if c.Verdict == probe.Contradicted {
			out = append(out, c.Declaration+"/"+c.Case)
		}
	}
	return out
}

// requireEffectsCounted: the effects the report lists are the charges the
// processor made, reference for reference.
func requireEffectsCounted(t *testing.T, srv *fakepay.Server, rep *probe.Report) {
	t.Helper()
	var made, listed []string
	for _, c := range srv.Charges() {
		made = append(made, c.ID)
		require.True(t, strings.HasPrefix(c.IdempotencyKey, probe.KeyPrefix+rep.Run+"-"), "every key is the probe's own: %q", c.IdempotencyKey)
	}
	for _, e := range rep.Effects {
		listed = append(listed, e.Ref)
	}
	require.ElementsMatch(t, made, listed, "the report lists exactly the effects made")
}

const (
	sameKey    = "dedupes_keys/same key twice"
	twins      = "dedupes_keys/concurrent twins"
	otherBody  = "dedupes_keys/same key, another body"
	lookupNow  = "lookup_url/a lookup right after the effect finds it"
	statusMaps = "lookup_status_field/the lookup's status maps to lookup_succeeded"
	never      = "lookup_url/a key never used answers 404 (not found)"
	refused    = "definitive_statuses/a request the downstream must refuse (--invalid-args)"
	noRefusal  = "definitive_statuses/no declared refusal for a key with an effect"
	retention  = "key_retention/the downstream remembers a key as long as declared"
)

func consistentCase(n int) string {
	return "lookup_consistent/" + strconv.Itoa(n) + " lookups at once after the effect"
}

// TestDemoToolsHonestProcessorAllOK: the demo tools file against an honest
// processor: every check that can be settled is ok, the rest say why not,
// and the effects listed are the charges made.
func TestDemoToolsHonestProcessorAllOK(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{})
	rep := run(t, demoTool(t, url, "pay_invoice"), probe.Options{InvalidArgs: json.RawMessage(invalidArgs)})
	require.Empty(t, contradicted(rep))
	v := verdicts(rep)
	for _, c := range []string{"external_ref_field/a 2xx answer names its effect", sameKey, twins, otherBody, lookupNow, statusMaps,
		consistentCase(probe.DefaultLookups), never, refused, noRefusal} {
		require.Equal(t, probe.OK, v[c], c)
	}
	for _, c := range []string{retention, "timeout/per attempt", "rate_limits/429 answers"} {
		require.Equal(t, probe.NotVerifiable, v[c], c)
	}
	require.Len(t, rep.Effects, 2, "one effect under the first key, one under the twins'")
	requireEffectsCounted(t, srv, rep)
	require.Empty(t, rep.Error)
}

// TestNoKeySupport: a processor that ignores keys, declared dedupes_keys:
// true: the repeat and the twins make effects of their own.
func TestNoKeySupport(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{NoKeySupport: true})
	rep := run(t, chargeTool(t, url, "      dedupes_keys: true\n"), probe.Options{})
	require.ElementsMatch(t, []string{sameKey, twins}, contradicted(rep))
	requireEffectsCounted(t, srv, rep)
	require.Greater(t, len(rep.Effects), 2)
	for _, c := range rep.Checks {
		if c.Case == "same key twice" {
			require.Contains(t, c.Detail, "two effects under one key")
			require.Len(t, c.Evidence, 1)
			require.NotEqual(t, rep.Effects[0].Ref, c.Evidence[0].Ref)
		}
	}
}

// TestKeyRace: keys checked with a read-then-insert race: one request after
// another replays, and only twins started together show the second effect.
// The same twins at an honest processor make one (the control is
// TestDemoToolsHonestProcessorAllOK).
func TestKeyRace(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{KeyRace: 300 * time.Millisecond})
	rep := run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: true\n")), probe.Options{})
	require.Equal(t, []string{twins}, contradicted(rep))
	require.Equal(t, probe.OK, verdicts(rep)[sameKey])
	requireEffectsCounted(t, srv, rep)
}

// TestEventuallyConsistentLookup: a lookup that misses three times in ten,
// declared consistent, is caught by lookups repeated at once (bounded: 20),
// and the same downstream declared eventually consistent contradicts
// nothing.
func TestEventuallyConsistentLookup(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{LookupMiss: fakepay.Trigger{Rate: 0.3}})
	rep := run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: true\n")), probe.Options{})
	require.Equal(t, []string{consistentCase(probe.DefaultLookups)}, contradicted(rep))
	require.Equal(t, probe.OK, verdicts(rep)[lookupNow], "the lookup finds it, only not every time")
	requireEffectsCounted(t, srv, rep)

	rep = run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: false\n")), probe.Options{})
	require.Empty(t, contradicted(rep))
	require.Equal(t, probe.NotDeclared, verdicts(rep)[consistentCase(probe.DefaultLookups)])
}

// TestLaggingLookup: fakepay's lookup_lag (blind to charges younger than
// the lag) declared consistent is caught by the first lookup; declared
// eventually consistent, the lookup finds the effect once the lag has
// passed.
func TestLaggingLookup(t *testing.T) {
	t.Parallel()
	_, url := processor(t, fakepay.Faults{LookupLag: time.Second})
	rep := run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: true\n")), probe.Options{Lookups: 3, LookupWait: 3 * time.Second})
	require.Equal(t, []string{consistentCase(3)}, contradicted(rep))

	rep = run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n")), probe.Options{Lookups: 3, LookupWait: 3 * time.Second})
	require.Empty(t, contradicted(rep))
	require.Equal(t, probe.OK, verdicts(rep)[lookupNow])
}

// TestNotFoundForAKnownKey: a lookup that answers 404 for a key the
// processor knows (its POST still replays) is CONTRADICTED as a lookup, and
// as a consistent one.
func TestNotFoundForAKnownKey(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{LookupMiss: fakepay.Trigger{Rate: 1}})
	rep := run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: true\n")), probe.Options{})
	require.ElementsMatch(t, []string{lookupNow, consistentCase(probe.DefaultLookups)}, contradicted(rep))
	require.Equal(t, probe.OK, verdicts(rep)[sameKey], "POST knows the key")
	requireEffectsCounted(t, srv, rep)
}

// TestDefinitiveStatusAfterEffect: a 402 (definitive by default) answered
// after the charge was made is CONTRADICTED, found by the lookup; declared
// definitive_statuses without 402, the same answer is an unknown outcome
// and contradicts nothing.
func TestDefinitiveStatusAfterEffect(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{RefuseAfterCommit: fakepay.Trigger{Next: 1}})
	rep := run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: true\n")), probe.Options{})
	require.Equal(t, []string{noRefusal}, contradicted(rep))
	for _, c := range rep.Checks {
		if c.Declaration+"/"+c.Case == noRefusal {
			require.Equal(t, 402, c.Evidence[0].Status)
			require.Contains(t, c.Detail, rep.Effects[0].Ref)
		}
	}
	requireEffectsCounted(t, srv, rep)

	srv.SetFaults(fakepay.Faults{RefuseAfterCommit: fakepay.Trigger{Next: 1}})
	rep = run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: true\n      definitive_statuses: [400]\n")), probe.Options{})
	require.Empty(t, contradicted(rep))
}

// TestRefusedReplay: the repeat of a key with an effect refused 400.
func TestRefusedReplay(t *testing.T) {
	t.Parallel()
	_, url := processor(t, fakepay.Faults{RefuseReplay: fakepay.Trigger{Next: 1}})
	rep := run(t, chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: true\n")), probe.Options{})
	require.Equal(t, []string{noRefusal}, contradicted(rep))
	require.Equal(t, probe.NotVerifiable, verdicts(rep)[sameKey])
}

// TestInvalidArgsThatTakeEffect: --invalid-args answered with a declared
// definitive status after the processor made the charge (refuse_after_commit,
// set for that request alone) is CONTRADICTED by the lookup.
func TestInvalidArgsThatTakeEffect(t *testing.T) {
	t.Parallel()
	srv := fakepay.New(fakepay.Options{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The fourth key of a run is the --invalid-args one (after the effect's, the twins'
		// and the never-used one).
		if r.Method == http.MethodPost && strings.HasSuffix(r.Header.Get("Idempotency-Key"), "-4") {
			srv.SetFaults(fakepay.Faults{RefuseAfterCommit: fakepay.Trigger{Next: 1}})
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	tl := chargeTool(t, ts.URL, withLookup(ts.URL, "      dedupes_keys: true\n      lookup_consistent: true\n"))
	rep := run(t, tl, probe.Options{InvalidArgs: json.RawMessage(`{"invoice_id":"PROBE-2","amount_minor":7,"currency":"EUR"}`)})
	require.Equal(t, []string{refused}, contradicted(rep))
	requireEffectsCounted(t, srv, rep)
	require.Len(t, rep.Effects, 3, "the refused request's charge is counted")
}

// TestKeyRetention: a short declared retention is checked at 90% of it: a
// processor that forgets keys sooner is CONTRADICTED, one that keeps them
// as long is ok.
func TestKeyRetention(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{KeyRetention: 300 * time.Millisecond})
	rep := run(t, chargeTool(t, url, "      dedupes_keys: true\n      key_retention: 1s\n"), probe.Options{})
	require.Equal(t, []string{retention}, contradicted(rep))
	requireEffectsCounted(t, srv, rep)

	rep = run(t, chargeTool(t, url, "      dedupes_keys: true\n      key_retention: 300ms\n"), probe.Options{})
	require.Empty(t, contradicted(rep))
	require.Equal(t, probe.OK, verdicts(rep)[retention])
}

// TestToolWithoutLookupOrDedupe: the demo's send_email declares neither:
// those checks say not declared, and the probe sends no key twice.
func TestToolWithoutLookupOrDedupe(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{})
	rep := run(t, demoTool(t, url, "send_email"), probe.Options{Args: json.RawMessage(`{"to":"probe@example.com","subject":"probe","body":"probe"}`)})
	require.Empty(t, contradicted(rep))
	v := verdicts(rep)
	for _, c := range []string{sameKey, twins, otherBody, "lookup_url/a lookup by key", "lookup_consistent/a lookup by key",
		"lookup_status_field/a lookup by key", "lookup_url/a key never used", retention} {
		require.Equal(t, probe.NotDeclared, v[c], c)
	}
	require.Equal(t, probe.NotVerifiable, v[refused], "no --invalid-args")
	require.Len(t, srv.Emails(), 1, "one e-mail: nothing is sent twice to a downstream that does not dedupe")
	require.Len(t, rep.Effects, 1)
	require.Equal(t, srv.Emails()[0].ID, rep.Effects[0].Ref)
}

// TestDownstreamDown: nothing listens: a clear error and no verdict.
func TestDownstreamDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	rep, err := probe.Run(t.Context(), probe.Options{Tool: demoTool(t, url, "pay_invoice"), Args: json.RawMessage(payArgs)})
	require.ErrorContains(t, err, "the downstream did not answer POST "+url+"/charges")
	require.Equal(t, err.Error(), rep.Error)
	require.Empty(t, rep.Checks, "no check is presented")
	require.Empty(t, rep.Effects)
	var text bytes.Buffer
	rep.WriteText(&text)
	require.Contains(t, text.String(), "ABORTED")
	require.Contains(t, text.String(), "summary: no verdict")
}

// TestBadInput: what the probe refuses before it sends anything.
func TestBadInput(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{})
	pay := demoTool(t, url, "pay_invoice")
	for _, tc := range []struct {
		name string
		opts probe.Options
		want string
	}{
		{"no tool", probe.Options{Args: json.RawMessage(payArgs)}, "no tool"},
		{"args not an object", probe.Options{Tool: pay, Args: json.RawMessage(`[1]`)}, "--args: not a JSON object"},
		{"args the schema refuses", probe.Options{Tool: pay, Args: json.RawMessage(`{"invoice_id":"x"}`)}, "args_schema refuses"},
		{"invalid args not an object", probe.Options{Tool: pay, Args: json.RawMessage(payArgs), InvalidArgs: json.RawMessage(`"x"`)}, "--invalid-args: not a JSON object"},
		{"one twin", probe.Options{Tool: pay, Args: json.RawMessage(payArgs), Twins: 1}, "at least 2"},
		{"no lookups", probe.Options{Tool: pay, Args: json.RawMessage(payArgs), Lookups: -1}, "at least 1"},
	} {
		_, err := probe.Run(t.Context(), tc.opts)
		var ie *probe.InputError
		require.ErrorAs(t, err, &ie, tc.name)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	custom := *pay
	custom.Executor.Type = "grpc"
	_, err := probe.Run(t.Context(), probe.Options{Tool: &custom, Args: json.RawMessage(payArgs)})
	require.ErrorContains(t, err, "http executor only")
	require.Empty(t, srv.Charges(), "nothing was sent")
}

// TestArgsTheDownstreamRefuses: --args the schema allows and the processor
// refuses (an amount of -1, which this tool's schema does not bound): no
// verdict, and nothing was made.
func TestArgsTheDownstreamRefuses(t *testing.T) {
	t.Parallel()
	srv, url := processor(t, fakepay.Faults{})
	tl := chargeTool(t, url, withLookup(url, "      dedupes_keys: true\n      lookup_consistent: true\n"))
	rep, err := probe.Run(t.Context(), probe.Options{Tool: tl, Args: json.RawMessage(invalidArgs)})
	require.ErrorContains(t, err, "the downstream did not take --args")
	require.ErrorContains(t, err, "→ 400")
	require.Equal(t, err.Error(), rep.Error)
	require.Empty(t, rep.Checks)
	require.Empty(t, rep.Effects)
	require.Empty(t, srv.Charges())
}

// TestShownURL: credentials in a URL never reach the report; the lookup's
// {key} placeholder does.
func TestShownURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "http://127.0.0.1:7070/charges?idempotency_key={key}", probe.ShownURL("http://127.0.0.1:7070/charges?idempotency_key={key}"))
	shown := probe.ShownURL("https://u:hunter2@pay.example/charges?api_key=hunter2&k={key}")
	require.NotContains(t, shown, "hunter2")
	require.Contains(t, shown, "pay.example/charges?api_key=…&k={key}")
}

// TestFaultsTheLedgerSurvives: a processor that answers an effect with a
// 500, a reset, a redirect, or holds requests in flight (twins get 409) does
// what the declarations say: nothing is contradicted, the effect is found
// by the lookup and counted.
func TestFaultsTheLedgerSurvives(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]fakepay.Faults{
		"fail_after_commit":     {FailAfterCommit: fakepay.Trigger{Next: 1}},
		"drop_after_commit":     {DropAfterCommit: fakepay.Trigger{Next: 1}},
		"redirect_after_commit": {RedirectAfterCommit: fakepay.Trigger{Next: 1}},
		"delay":                 {Delay: 100 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, url := processor(t, f)
			rep := run(t, demoTool(t, url, "pay_invoice"), probe.Options{InvalidArgs: json.RawMessage(invalidArgs)})
			require.Empty(t, contradicted(rep))
			require.Equal(t, probe.OK, verdicts(rep)[twins])
			requireEffectsCounted(t, srv, rep)
		})
	}
	// A 500 before anything was stored: the lookup finds nothing, so the
	// probe has no effect to check and gives no verdict.
	_, url := processor(t, fakepay.Faults{FailBeforeCommit: fakepay.Trigger{Next: 1}})
	_, err := probe.Run(t.Context(), probe.Options{Tool: demoTool(t, url, "pay_invoice"), Args: json.RawMessage(payArgs)})
	require.ErrorContains(t, err, "the downstream did not take --args: POST")
	require.ErrorContains(t, err, "→ 500")
}
