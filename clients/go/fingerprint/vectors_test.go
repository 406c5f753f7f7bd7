package fingerprint

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/opledger/opledger/clients/go/internal/require"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from vectorCases")

const (
	vectorsPath   = "testdata/vectors.json"
	prepareMethod = "/opledger.v1.LedgerService/Prepare"
)

// vector is one entry of testdata/vectors.json, the file client authors in
// other languages check their implementation against.
type vector struct {
	Name        string          `json:"name"`
	Method      string          `json:"method"`
	Tenant      string          `json:"tenant"`
	Tool        string          `json:"tool"`
	ToolVersion string          `json:"tool_version"`
	Args        json.RawMessage `json:"args"`
	Canonical   string          `json:"canonical"`
	Fingerprint string          `json:"fingerprint"`
}

type vectorFile struct {
	Comment string   `json:"comment"`
	Version string   `json:"version"`
	Vectors []vector `json:"vectors"`
}

// vectorCases are the inputs of the published vectors. Args are JSON text
// kept verbatim in the file (odd spellings such as 4.50 and 1E30, \u
// escapes, surrogate pairs) so that clients also exercise their parser.
var vectorCases = []struct {
	name, tenant, tool, version, args string
}{
	{"demo_pay_invoice_4900", "demo", "pay_invoice", "1",
		`{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`},
	{"demo_pay_invoice_49000", "demo", "pay_invoice", "1",
		`{"invoice_id":"INV-2048","amount_minor":49000,"currency":"EUR"}`},
	{"demo_pay_invoice_4900_other_tenant", "acme", "pay_invoice", "1",
		`{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`},
	{"demo_pay_invoice_4900_spelled_differently", "demo", "pay_invoice", "1",
		`{ "currency" : "\u0045UR", "amount_minor" : 4.9e3, "invoice_id" : "INV-2048" }`},
	{"amount_as_string_differs", "demo", "pay_invoice", "1",
		`{"invoice_id":"INV-2048","amount_minor":"4900","currency":"EUR"}`},
	{"demo_send_email", "demo", "send_email", "1",
		`{"to":"ops@example.com","subject":"Invoice INV-2048 paid","body":"Hello,\nyour invoice INV-2048 was paid.\n"}`},
	{"tool_version_2", "demo", "pay_invoice", "2",
		`{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`},
	{"empty_args", "demo", "ping", "1", `{}`},
	{"null_args_are_empty_object", "demo", "ping", "1", `null`},
	{"key_ordering_utf16", "demo", "echo", "1",
		`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis","":"empty","a":"a","aa":"aa","B":"upper B","b":"lower b"}`},
	{"nested_objects_and_arrays", "demo", "echo", "1",
		`{"z":{"y":[3,{"b":[],"a":{}},[[1,2],[]]],"x":{"d":{"c":{"b":{"a":"deep"}}}}},"a":[{"k2":2,"k1":1},{"k1":1}]}`},
	{"unicode_strings", "demo", "echo", "1",
		`{"german":"Grüße","cjk":"世界","emoji":"😀 \ud83d\ude80","rtl":"שלום","nfd_not_normalized":"e\u0301","nfc":"\u00e9","bmp_private":"\ue000","line_separators":"\u2028\u2029"}`},
	{"string_escapes", "demo", "echo", "1",
		`{"rfc8785":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","controls":"\u0000\u0001\u0007\b\t\n\u000b\f\r\u000e\u001f","del":"\u007f","html":"<script>&amp;</script>","slash":"a/b\/c","quote_backslash":"\"\\"}`},
	{"integers", "demo", "echo", "1",
		`{"zero":0,"one":1,"negative":-42,"max_safe":9007199254740991,"two_to_53":9007199254740992,"min_safe":-9007199254740991,"e20":100000000000000000000,"int_with_fraction_zero":4900.000,"int_spelled_exp":49E2}`},
	{"floats", "demo", "echo", "1",
		`{"a":4.50,"b":0.1,"c":0.30000000000000004,"d":333333333.33333329,"e":-0.0000033333333333333333,"f":1424953923781206.2,"g":0.000001,"h":123.456,"i":-1.5}`},
	{"exponents", "demo", "echo", "1",
		`{"e30":1E30,"e21":1e21,"below_e21":999999999999999900000,"e23":1e23,"milli":2e-3,"e_minus_7":1e-7,"e_minus_27":0.000000000000000000000000001,"min_subnormal":5e-324,"max_double":1.7976931348623157e308,"neg_max_double":-1.7976931348623157e+308,"neg_small":-1.2e-7}`},
	{"negative_zero", "demo", "echo", "1",
		`{"neg_zero":-0,"neg_zero_float":-0.0,"neg_zero_exp":-0e10,"in_array":[-0,0]}`},
	{"booleans_and_null", "demo", "echo", "1",
		`{"t":true,"f":false,"n":null,"list":[null,true,false],"nested":{"n":null}}`},
	{"rfc8785_example", "demo", "echo", "1",
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`},
}

func buildVectors(t *testing.T) vectorFile {
	t.Helper()
	f := vectorFile{
		Comment: "opledger fingerprint test vectors; see docs/fingerprint.md. " +
			"Parse args with a JSON parser (numbers as IEEE-754 doubles), build the preimage, " +
			"check it equals canonical byte for byte (UTF-8), then check fingerprint = \"v1:\" + hex(sha256(canonical)). " +
			"Regenerate with: (cd clients/go && go test ./fingerprint -run TestVectors -update)",
		Version: Version,
	}
	for _, c := range vectorCases {
		require.Truef(t, json.Valid([]byte(c.args)), "case %s: args are not valid JSON", c.name)
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, []byte(c.args)))
		in := Input{Method: prepareMethod, Tenant: c.tenant, Tool: c.tool, ToolVersion: c.version, Args: mustDecode(t, c.args)}
		pre, err := Preimage(in)
		require.NoError(t, err, c.name)
		fp, err := Compute(in)
		require.NoError(t, err, c.name)
		f.Vectors = append(f.Vectors, vector{
			Name: c.name, Method: in.Method, Tenant: in.Tenant, Tool: in.Tool, ToolVersion: in.ToolVersion,
			Args: compact.Bytes(), Canonical: string(pre), Fingerprint: fp,
		})
	}
	return f
}

func encodeVectors(t *testing.T, f vectorFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(f))
	return buf.Bytes()
}

// TestVectors keeps testdata/vectors.json in sync with vectorCases; run it
// with -update after changing the cases.
func TestVectors(t *testing.T) {
	want := encodeVectors(t, buildVectors(t))
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(vectorsPath), 0o755))
		require.NoError(t, os.WriteFile(vectorsPath, want, 0o644))
	}
	got, err := os.ReadFile(vectorsPath)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "vectors.json is stale: (cd clients/go && go test ./fingerprint -run TestVectors -update)")
}

// TestVectorsFile verifies the published file the way a client in another
// language would: from its JSON alone.
func TestVectorsFile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(vectorsPath)
	require.NoError(t, err)
	var f vectorFile
	require.NoError(t, json.Unmarshal(data, &f))
	require.Equal(t, Version, f.Version)
	require.GreaterOrEqual(t, len(f.Vectors), 12)
	seen := map[string]bool{}
	for _, v := range f.Vectors {
		require.False(t, seen[v.Name], "duplicate vector name %s", v.Name)
		seen[v.Name] = true
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			var args any
			require.NoError(t, json.Unmarshal(v.Args, &args))
			in := Input{Method: v.Method, Tenant: v.Tenant, Tool: v.Tool, ToolVersion: v.ToolVersion, Args: args}
			pre, err := Preimage(in)
			require.NoError(t, err)
			require.Equal(t, v.Canonical, string(pre))
			fp, err := Compute(in)
			require.NoError(t, err)
			require.Equal(t, v.Fingerprint, fp)
			// The raw text path must agree with the decoded path.
			fp2, err := Compute(Input{Method: v.Method, Tenant: v.Tenant, Tool: v.Tool, ToolVersion: v.ToolVersion, Args: v.Args})
			require.NoError(t, err)
			require.Equal(t, fp, fp2)
			// So must the path from already canonical args (the ledger's).
			obj := args
			if obj == nil {
				obj = map[string]any{} // null args are the empty object
			}
			canon, err := Canonicalize(obj)
			require.NoError(t, err)
			fp3, err := OfCanonical(v.Method, v.Tenant, v.Tool, v.ToolVersion, canon)
			require.NoError(t, err)
			require.Equal(t, fp, fp3)
		})
	}
}

func TestVectorsDemoInvariants(t *testing.T) {
	t.Parallel()
	byName := map[string]string{}
	for _, v := range buildVectors(t).Vectors {
		byName[v.Name] = v.Fingerprint
	}
	base := byName["demo_pay_invoice_4900"]
	require.NotEqual(t, base, byName["demo_pay_invoice_49000"], "amount must change the fingerprint")
	require.NotEqual(t, base, byName["demo_pay_invoice_4900_other_tenant"], "tenant must change the fingerprint")
	require.NotEqual(t, base, byName["tool_version_2"], "tool version must change the fingerprint")
	require.NotEqual(t, base, byName["amount_as_string_differs"], "a string is not a number")
	require.Equal(t, base, byName["demo_pay_invoice_4900_spelled_differently"], "JSON spelling must not matter")
	require.Equal(t, byName["empty_args"], byName["null_args_are_empty_object"])
}
