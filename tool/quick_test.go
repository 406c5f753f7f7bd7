package tool

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// quickTool parses a one-tool file whose args schema is schema (JSON).
func quickTool(t testing.TB, schema string) *Tool {
	t.Helper()
	y := fmt.Sprintf("tools:\n  - name: t\n    version: \"1\"\n    effect: side_effect\n    args_schema: %s\n"+
		"    executor:\n      type: http\n      url: https://example.com/x\n", schema)
	r, err := Parse([]byte(y), fakeEnv(nil))
	require.NoError(t, err, schema)
	tl, err := r.Lookup("t", "1")
	require.NoError(t, err)
	return tl
}

// quickSchemas are schemas inside quickSchema's subset, built to put its
// edges (bounds, lengths in characters, patterns, closed and open objects)
// where args can fall on either side of them.
var quickSchemas = []string{
	`{"type":"object","properties":{"invoice_id":{"type":"string","minLength":1,"maxLength":64},"amount_minor":{"type":"integer","exclusiveMinimum":0},"currency":{"type":"string","pattern":"^[A-Z]{3}$"}},"required":["invoice_id","amount_minor","currency"],"additionalProperties":false}`,
	`{"type":"object","properties":{"n":{"type":"number","minimum":-1.5,"maximum":1e22},"i":{"type":"integer","exclusiveMaximum":9007199254740992},"b":{"type":"boolean"},"s":{"type":"string","maxLength":2,"pattern":"é"}}}`,
	`{"type":"object","required":["h"],"properties":{"h":{"type":"number","minimum":0.5,"exclusiveMaximum":0.75}}}`,
	`{"type":"object","title":"annotated","description":"d","properties":{"x":{"type":"integer","minimum":0,"description":"x","examples":[1]}},"additionalProperties":true}`,
}

// quickArgs are args for them, as JSON.
var quickArgs = []string{
	`{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`,
	`{"invoice_id":"","amount_minor":4900,"currency":"EUR"}`,
	`{"invoice_id":"INV","amount_minor":0,"currency":"EUR"}`,
	`{"invoice_id":"INV","amount_minor":-0,"currency":"EUR"}`,
	`{"invoice_id":"INV","amount_minor":1e-320,"currency":"EUR"}`,
	`{"invoice_id":"INV","amount_minor":4900.5,"currency":"EUR"}`,
	`{"invoice_id":"INV","amount_minor":1e300,"currency":"EUR"}`,
	`{"invoice_id":"INV","amount_minor":1,"currency":"eur"}`,
	`{"invoice_id":"INV","amount_minor":1,"currency":"EURO"}`,
	`{"invoice_id":"INV","amount_minor":1,"currency":"EUR","x":1}`,
	`{"invoice_id":"INV","amount_minor":"1","currency":"EUR"}`,
	`{"invoice_id":null,"amount_minor":1,"currency":"EUR"}`,
	`{"amount_minor":1,"currency":"EUR"}`,
	`{"invoice_id":"` + strings.Repeat("é", 64) + `","amount_minor":1,"currency":"EUR"}`,
	`{"invoice_id":"` + strings.Repeat("é", 65) + `","amount_minor":1,"currency":"EUR"}`,
	`{"n":-1.5,"i":9007199254740991,"b":true,"s":"é"}`,
	`{"n":-1.5000000000000002,"i":9007199254740992,"b":1,"s":"éé"}`,
	`{"n":1e22,"s":"éa"}`, `{"n":1.0000000000000001e22}`, `{"n":1.0000000000000002e22}`, `{"s":"abc"}`, `{"s":"a"}`,
	`{"h":0.5000000000000001}`, `{"h":0.5}`, `{"h":0.49999999999999994}`, `{"h":0.7499999999999999}`, `{"h":0.75}`, `{}`,
	`{"x":0,"y":{"z":[1,null]}}`, `{"x":-1}`, `{"x":1.5}`, `{"x":true}`,
}

// TestQuickSchemaAgrees: whatever quickSchema accepts, the library
// accepts, at every edge of the subset; and it does accept the demo tool's
// valid args (or it would save nothing).
func TestQuickSchemaAgrees(t *testing.T) {
	t.Parallel()
	accepted := 0
	for _, schema := range quickSchemas {
		tl := quickTool(t, schema)
		require.NotNil(t, tl.quick, "inside the subset: %s", schema)
		for _, a := range quickArgs {
			var d any
			require.NoError(t, json.Unmarshal([]byte(a), &d), a)
			v, err := normalizeArgs(d)
			require.Nil(t, err)
			if tl.quick.accepts(v) {
				accepted++
				require.NoError(t, tl.schema.Validate(v), "quickSchema accepted what the library refuses: %s against %s", a, schema)
			}
		}
	}
	require.Greater(t, accepted, 8)
	pay := quickTool(t, quickSchemas[0])
	v, _ := normalizeArgs(json.RawMessage(quickArgs[0]))
	require.True(t, pay.quick.accepts(v))
}

// TestQuickSchemaLeavesTheRest: a schema with anything outside the subset
// is the library's alone.
func TestQuickSchemaLeavesTheRest(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{
		`{"type":"object","properties":{"to":{"type":"string","format":"email"}}}`,
		`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"string"}}}}}`,
		`{"type":"object","properties":{"a":{"type":"string","enum":["x","y"]}}}`,
		`{"type":"object","properties":{"a":{"type":"integer","multipleOf":5}}}`,
		`{"type":"object","properties":{"a":{"type":"number","minimum":0.1}}}`,
		`{"type":"object","properties":{"a":{"type":"number","minimum":0.5000000000000002220446049250313080847263336181640625}}}`,
		`{"type":"object","properties":{"a":{"type":"integer","pattern":"x"}}}`,
		`{"type":"object","properties":{"a":{"type":["string","null"]}}}`,
		`{"type":"object","properties":{"a":{"type":"array"}}}`,
		`{"type":"object","properties":{"a":{}}}`,
		`{"type":"object","additionalProperties":{"type":"string"}}`,
		`{"type":"object","minProperties":1}`,
		`{"type":"object","oneOf":[{"required":["a"]},{"required":["b"]}]}`,
		`{"type":"object","$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/s"}}}`,
	} {
		require.Nil(t, quickTool(t, schema).quick, schema)
	}
}

// FuzzQuickSchemaAgrees: for any args, quickSchema accepts only what the
// library accepts.
func FuzzQuickSchemaAgrees(f *testing.F) {
	for _, a := range quickArgs {
		f.Add([]byte(a))
	}
	var tools []*Tool
	for _, s := range quickSchemas {
		tools = append(tools, quickTool(f, s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d any
		if json.Unmarshal(data, &d) != nil {
			t.Skip()
		}
		v, err := normalizeArgs(d)
		if err != nil {
			t.Skip()
		}
		for i, tl := range tools {
			if tl.quick.accepts(v) {
				require.NoError(t, tl.schema.Validate(v), "quickSchema accepted what the library refuses: %s against %s", data, quickSchemas[i])
			}
		}
	})
}
