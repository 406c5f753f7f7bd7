package executor

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStorable: each thing PostgreSQL's jsonb cannot hold becomes what
// Storable's contract says, and nothing else changes (store's
// FuzzStorableIsStored holds it against PostgreSQL itself).
func TestStorable(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{`{"id":"ch_1","amount_minor":4900,"currency":"EUR"}`, ""},
		{`{"a":"\u00e9\n\"\\","b":[1,-2.5e10,0,-0.0,1E+5,true,null]}`, ""},
		{`{"a":"\\u0000"}`, ""}, // an escaped backslash, then text
		{`{"pair":"\ud83d\ude00","PAIR":"\uD83D\uDE00"}`, ""},
		{`{"a":"x\u0000y"}`, `{"a":"x\ufffdy"}`},
		{`{"a\u0000":1}`, `{"a\ufffd":1}`},
		{`{"a":"\\\u0000"}`, `{"a":"\\\ufffd"}`},
		{`{"a":"\ud800"}`, `{"a":"\ufffd"}`},
		{`{"a":"\uD800x"}`, `{"a":"\ufffdx"}`},
		{`{"a":"\ud800\u0041"}`, `{"a":"\ufffd\u0041"}`},
		{`{"a":"\ud800\ud800\udc00"}`, `{"a":"\ufffd\ud800\udc00"}`},
		{`{"a":"\udc00\ud800"}`, `{"a":"\ufffd\ufffd"}`},
		{"{\"a\":\"x\xff\xc3\"}", "{\"a\":\"x\uFFFD\uFFFD\"}"},
		{"{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\uFFFD\uFFFD\uFFFD\"}"}, // a surrogate written as UTF-8
		{"{\"a\":\"\uFFFD\"}", ""},
		{`{"n":1e-16383,"m":1e131071,"z":0e99999,"w":0.0001e131075,"s":1.5e-16382}`, ""},
		{`{"n":1e-16384}`, `{"n":"1e-16384"}`},
		{`{"n":1e131072}`, `{"n":"1e131072"}`},
		{`{"n":0e-99999}`, `{"n":"0e-99999"}`},
		{`{"n":0.0e-16383}`, `{"n":"0.0e-16383"}`},
		{`{"n":0.0001e131076}`, `{"n":"0.0001e131076"}`},
		{`[-1.5E+200000,1e99999999999999999999]`, `["-1.5E+200000","1e99999999999999999999"]`},
		{`{"n":"1e-99999"}`, ""}, // a string, not a number
		// Nesting: the top-level object is level 1; MaxStoredDepth levels
		// are kept, and a deeper object or array becomes a string of its
		// compact text, whatever it holds.
		{`{"x":` + nest(MaxStoredDepth-2, `{"a":1}`) + `}`, ""}, // MaxStoredDepth levels, the last an object
		{`{"x":` + nest(MaxStoredDepth-1, `1`) + `,"s":"[[[[[[[[[[[[[[[[[[[[[[[[[["}`, ""},
		{`{"x":` + nest(MaxStoredDepth, `1`) + `}`, `{"x":` + nest(MaxStoredDepth-1, `"[1]"`) + `}`},
		{`{"x":` + nest(MaxStoredDepth-2, `{"a":{"b":[1, {"c" : "]}\"\u0000"}]}}`) + `}`,
			`{"x":` + nest(MaxStoredDepth-2, `{"a":"{\"b\":[1,{\"c\":\"]}\\\"\\u0000\"}]}"}`) + `}`},
		{`{"x":` + nest(MaxStoredDepth-1, `[1e-20000,"\ud800","<&>"],["x\u00e9"]`) + `,"y":2}`,
			`{"x":` + nest(MaxStoredDepth-1, `"[1e-20000,\"\\ud800\",\"<&>\"]","[\"x\\u00e9\"]"`) + `,"y":2}`},
		{"{\"x\":" + nest(MaxStoredDepth, "\"\xff\"") + "}", `{"x":` + nest(MaxStoredDepth-1, "\"[\\\"\uFFFD\\\"]\"") + `}`},
		{`{"x":` + nest(9000, `1`) + `,"id":"ch_1"}`, `{"x":` + nest(MaxStoredDepth-1, `"`+nest(9000-MaxStoredDepth+1, `1`)+`"`) + `,"id":"ch_1"}`},
		{nest(MaxStoredDepth+1, ``), nest(MaxStoredDepth, `"[]"`)}, // an array at the top, as Storable takes any JSON
	}
	for _, c := range cases {
		want := c.want
		if want == "" {
			want = c.in
		}
		got := Storable([]byte(c.in))
		require.Equal(t, want, string(got), "Storable(%q)", c.in)
		require.True(t, json.Valid(got), "%q", got)
		require.Equal(t, string(got), string(Storable(got)), "Storable is idempotent on %q", got)
		require.LessOrEqual(t, depth(t, got), MaxStoredDepth, "%q", got)
		if c.want == "" {
			in := []byte(c.in)
			require.Same(t, &in[0], &Storable(in)[0], "an answer with nothing to change is not copied: %q", c.in)
		}
	}
}

// nest is inner inside n arrays.
func nest(n int, inner string) string {
	return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
}

// depth is the deepest level of objects and arrays in the JSON text b.
func depth(t *testing.T, b []byte) int {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	level, deepest := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return deepest
		}
		require.NoError(t, err)
		switch tok {
		case json.Delim('{'), json.Delim('['):
			level++
			deepest = max(deepest, level)
		case json.Delim('}'), json.Delim(']'):
			level--
		}
	}
}

func TestStorableText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ch_1", StorableText("ch_1"))
	require.Equal(t, "ch_\uFFFD1\uFFFD", StorableText("ch_\x001\xff"))
	require.Equal(t, "x\uFFFD\uFFFDy\uFFFD\uFFFD", StorableText("x\xff\xfey\xed\xa0"), "each byte that is not UTF-8, as Storable")
	require.Equal(t, "é\uFFFD😀", StorableText("é\uFFFD😀"))
}

// BenchmarkStorable measures what every recorded outcome pays for the rule:
// the fake processor's charge, which has nothing to change.
func BenchmarkStorable(b *testing.B) {
	body := []byte(`{"amount_minor":4900,"created":1796157479,"currency":"EUR","id":"ch_dkPxWKgb3uL6xEpsGwkd5qeR",` +
		`"idempotency_key":"opk_Bi_ir8TgsssFjsK1xQWRE7LfxhnN_pCKYpxbyl9vlzU","invoice_id":"INV-c60c8210","object":"charge",` +
		`"request":{"amount_minor":4900,"currency":"EUR","invoice_id":"INV-c60c8210"},"status":"succeeded"}`)
	b.ReportAllocs()
	for b.Loop() {
		_ = Storable(Object(body))
	}
}
