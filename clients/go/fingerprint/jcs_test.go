package fingerprint

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/opledger/opledger/clients/go/internal/require"
	"google.golang.org/protobuf/types/known/structpb"
)

func mustDecode(t *testing.T, text string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(text), &v))
	return v
}

// TestCanonicalizeRFC8785Examples uses the examples of RFC 8785 §3.2.2 and
// §3.2.3 (property sorting by UTF-16 code units).
func TestCanonicalizeRFC8785Examples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, input, want string
	}{
		{
			name: "section 3.2.2",
			input: `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "section 3.2.3 sorting",
			input: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{
			name:  "cyberphone sample",
			input: `{"numbers":[1E30,4.50,6,2e-3,0.000000000000000000000000001],"escaping":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","other":[null,true,false]}`,
			want:  `{"escaping":"€$\u000f\nA'B\"\\\\\"/","numbers":[1e+30,4.5,6,0.002,1e-27],"other":[null,true,false]}`,
		},
		{name: "empty object", input: `{}`, want: `{}`},
		{name: "empty array", input: `[]`, want: `[]`},
		{name: "nested", input: ` { "b" : [ {"d":1, "c":[ ]} ] , "a" : { } } `, want: `{"a":{},"b":[{"c":[],"d":1}]}`},
		{name: "scalar string", input: `"x"`, want: `"x"`},
		{name: "scalar null", input: `null`, want: `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize(mustDecode(t, tt.input))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
			// The same text through json.RawMessage must agree.
			got, err = Canonicalize(json.RawMessage(tt.input))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

// TestCanonicalizeNumbersAppendixB is RFC 8785 Appendix B: IEEE-754 bit
// patterns and their canonical text.
func TestCanonicalizeNumbersAppendixB(t *testing.T) {
	t.Parallel()
	tests := []struct{ bits, want string }{
		{"0000000000000000", "0"},
		{"8000000000000000", "0"},
		{"0000000000000001", "5e-324"},
		{"8000000000000001", "-5e-324"},
		{"7fefffffffffffff", "1.7976931348623157e+308"},
		{"ffefffffffffffff", "-1.7976931348623157e+308"},
		{"4340000000000000", "9007199254740992"},
		{"c340000000000000", "-9007199254740992"},
		{"4430000000000000", "295147905179352830000"},
		{"44b52d02c7e14af5", "9.999999999999997e+22"},
		{"44b52d02c7e14af6", "1e+23"},
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},
		{"444b1ae4d6e2ef4e", "999999999999999700000"},
		{"444b1ae4d6e2ef4f", "999999999999999900000"},
		{"444b1ae4d6e2ef50", "1e+21"},
		{"3eb0c6f7a0b5ed8c", "9.999999999999997e-7"},
		{"3eb0c6f7a0b5ed8d", "0.000001"},
		{"41b3de4355555553", "333333333.3333332"},
		{"41b3de4355555554", "333333333.33333325"},
		{"41b3de4355555555", "333333333.3333333"},
		{"41b3de4355555556", "333333333.3333334"},
		{"41b3de4355555557", "333333333.33333343"},
		{"becbf647612f3696", "-0.0000033333333333333333"},
		{"43143ff3c1cb0959", "1424953923781206.2"},
	}
	for _, tt := range tests {
		t.Run(tt.bits, func(t *testing.T) {
			t.Parallel()
			u, err := strconv.ParseUint(tt.bits, 16, 64)
			require.NoError(t, err)
			got, err := Canonicalize(math.Float64frombits(u))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

func TestCanonicalizeNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   any
		want string
	}{
		{1e21, "1e+21"},
		{1e20, "100000000000000000000"},
		{1e-7, "1e-7"},
		{0.000001, "0.000001"},
		{0.0000012, "0.0000012"},
		{1.2e-7, "1.2e-7"},
		{333333333.33333329, "333333333.3333333"},
		{math.Copysign(0, -1), "0"},
		{5e-324, "5e-324"},
		{1.7976931348623157e308, "1.7976931348623157e+308"},
		{4900.0, "4900"},
		{-4900.5, "-4900.5"},
		{0.1, "0.1"},
		{sum(0.1, 0.2), "0.30000000000000004"},
		{123e-20, "1.23e-18"},
		{1.5e300, "1.5e+300"},
		// Convenience types convert to float64 first.
		{json.Number("4.50"), "4.5"},
		{json.Number("1E30"), "1e+30"},
		{json.Number("-0"), "0"},
		{int(4900), "4900"},
		{int64(-7), "-7"},
		{int64(1) << 53, "9007199254740992"},
		{int64(1)<<53 + 1, "9007199254740992"}, // rounded, as on the wire
		{uint64(math.MaxUint64), "18446744073709552000"},
		{uint8(7), "7"},
		{float32(0.5), "0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

// sum defeats constant folding, which would compute 0.1+0.2 exactly.
func sum(a, b float64) float64 { return a + b }

func TestCanonicalizeStrings(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"plain", "abc", `"abc"`},
		{"quote and backslash", `a"b\c`, `"a\"b\\c"`},
		{"short escapes", "\b\t\n\f\r", `"\b\t\n\f\r"`},
		{"other controls lowercase hex", "\x00\x01\x0b\x0e\x1f", `"\u0000\u0001\u000b\u000e\u001f"`},
		{"no html escaping", "<a href='x'>&</a>", `"<a href='x'>&</a>"`},
		{"slash not escaped", "a/b", `"a/b"`},
		{"DEL not escaped", "\x7f", "\"\x7f\""},
		{"line separators raw", "\u2028\u2029", "\"\u2028\u2029\""},
		{"non-ASCII raw", "Grüße 世界 😀", `"Grüße 世界 😀"`},
		{"no normalization", "e\u0301", "\"e\u0301\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

func TestCanonicalizeKeyOrderUTF16(t *testing.T) {
	t.Parallel()
	// U+FB33 sorts after U+1F600 in UTF-8/code point order but before it in
	// UTF-16 (0xFB33 < 0xD83D).
	got, err := Canonicalize(map[string]any{"\ufb33": 1.0, "\U0001F600": 2.0, "b": 3.0, "a": 4.0, "": 5.0, "aa": 6.0})
	require.NoError(t, err)
	require.Equal(t, "{\"\":5,\"a\":4,\"aa\":6,\"b\":3,\"😀\":2,\"\ufb33\":1}", string(got))
}

func TestCanonicalizeStructpb(t *testing.T) {
	t.Parallel()
	s, err := structpb.NewStruct(map[string]any{"b": 1, "a": []any{"x", true, nil, 2.5}})
	require.NoError(t, err)
	want := `{"a":["x",true,null,2.5],"b":1}`
	for _, v := range []any{s, structpb.NewStructValue(s), s.AsMap()} {
		got, err := Canonicalize(v)
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	}
	got, err := Canonicalize(s.Fields["a"].GetListValue())
	require.NoError(t, err)
	require.Equal(t, `["x",true,null,2.5]`, string(got))
}

func TestCanonicalizeErrors(t *testing.T) {
	t.Parallel()
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	tests := []struct {
		name string
		in   any
	}{
		{"NaN", math.NaN()},
		{"+Inf", math.Inf(1)},
		{"-Inf in array", []any{math.Inf(-1)}},
		{"NaN in struct value", structpb.NewNumberValue(math.NaN())},
		{"Inf in struct", &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewNumberValue(math.Inf(1))}}},
		{"unset value kind", &structpb.ListValue{Values: []*structpb.Value{{}}}},
		{"invalid UTF-8 string", "\xff"},
		{"invalid UTF-8 key", map[string]any{"\xc3": 1.0}},
		{"unsupported type", struct{}{}},
		{"unsupported nested type", map[string]any{"a": []string{"x"}}},
		{"bytes", []byte("x")},
		{"number out of range", json.Number("1e400")},
		{"bad number", json.Number("abc")},
		{"bad raw JSON", json.RawMessage(`{"a":`)},
		{"raw JSON trailing data", json.RawMessage(`{} {}`)},
		{"cycle", cyclic},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Canonicalize(tt.in)
			require.ErrorIs(t, err, ErrUnsupported)
		})
	}
}

// BenchmarkCanonicalizeStruct measures what the server does to every
// Prepare's args.
func BenchmarkCanonicalizeStruct(b *testing.B) {
	s, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR",
		"meta": map[string]any{"customer": "cus_123", "note": "März", "tags": []any{"a", "b"}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for range b.N {
		if _, err := Canonicalize(s); err != nil {
			b.Fatal(err)
		}
	}
}
