package console

import (
	"math/big"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFormatMinor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    string
		exp  int
		want string
	}{
		{"4900", 2, "49.00"}, {"5", 2, "0.05"}, {"0", 2, "0.00"}, {"123456789", 2, "1,234,567.89"},
		{"-4900", 2, "-49.00"}, {"4900", 0, "4,900"}, {"1234", 3, "1.234"}, {"100000000000000000001", 2, "1,000,000,000,000,000,000.01"},
	} {
		n, ok := new(big.Int).SetString(tc.n, 10)
		require.True(t, ok)
		require.Equal(t, tc.want, formatMinor(n, tc.exp), "%s, %d", tc.n, tc.exp)
	}
}

// TestArgFields: nested args become rows with paths; amounts in minor units
// get their currency and decimals; numbers stay exactly as stored.
func TestArgFields(t *testing.T) {
	t.Parallel()
	got := argFields([]byte(`{"amount_minor":4900,"currency":"EUR","fee":{"fee_minor":150,"fee_currency":"JPY"},` +
		`"lines":[{"sku":"A-1","qty":2}],"total_minor_units":1005,"note":null,"rush":true,"big":12345678901234567890,` +
		`"refund":{"amount_minor":7,"currency":"BHD"},"odd_minor":1.5,"loose_minor":10}`))
	byPath := map[string]Field{}
	for _, f := range got {
		byPath[f.Path] = f
	}
	require.Equal(t, "minor units: EUR 49.00", byPath["amount_minor"].Note)
	require.Equal(t, "minor units: JPY 150", byPath["fee.fee_minor"].Note)
	require.Equal(t, "minor units: BHD 0.007", byPath["refund.amount_minor"].Note)
	require.Equal(t, "minor units: EUR 10.05", byPath["total_minor_units"].Note)
	require.Equal(t, "minor units (not a whole number!)", byPath["odd_minor"].Note)
	require.Equal(t, "minor units: EUR 0.10", byPath["loose_minor"].Note)
	require.Equal(t, "A-1", byPath["lines[0].sku"].Value)
	require.Equal(t, "2", byPath["lines[0].qty"].Value)
	require.Equal(t, "null", byPath["note"].Value)
	require.Equal(t, "true", byPath["rush"].Value)
	require.Equal(t, "12345678901234567890", byPath["big"].Value)
	require.Empty(t, byPath["big"].Note)
	for i := 1; i < len(got); i++ {
		require.Less(t, got[i-1].Path, got[i].Path)
	}
	require.Equal(t, "minor units (no ISO 4217 currency code beside it)", argFields([]byte(`{"amount_minor":1}`))[0].Note)

	// A currency that is not a code (here one right-to-left override, three
	// bytes) is not written into the amount's note, where it would reach
	// the page unescaped; its own row shows it escaped and flagged.
	for _, f := range argFields([]byte("{\"amount_minor\":100009,\"currency\":\"\u202e\"}")) {
		require.NotContains(t, f.Note, "\u202e", f.Path)
		if f.Path == "currency" {
			require.True(t, f.Hidden)
		}
	}
}

// TestVisible: what a person could not see, or what reorders text, is
// shown escaped and flagged.
func TestVisible(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"INV-2048":             "",
		"Zürich café 東京":       "",
		"INV-\u202e8402":       `INV-\u202E8402`,
		"pay\u200bme":          `pay\u200Bme`,
		"a\tb\nc":              `a\u0009b\u000Ac`,
		"no\u00a0break":        `no\u00A0break`,
		"private\U000F0000":    `private\U000F0000`,
		"bom\ufeff":            `bom\uFEFF`,
		"iso\u2066late\u2069":  `iso\u2066late\u2069`,
		"tag\U000E0041":        `tag\U000E0041`,
		"two  spaces are fine": "",
		"INV-2048\u3164":       `INV-2048\u3164`,
		"\u115fhangul":         `\u115Fhangul`,
		"half\uffa0width":      `half\uFFA0width`,
		"cgj\u034f":            `cgj\u034F`,
		"braille\u2800blank":   `braille\u2800blank`,
		"heart \u2764\ufe0f":   "",
		"\u845b\U000E0100":     "",
		"\ufe0fstray":          `\uFE0Fstray`,
		"run\ufe0f\ufe0f":      `run\uFE0F\uFE0F`,
		"after space \ufe0f":   `after space \uFE0F`,
		"line\u2028sep":        `line\u2028sep`,
		// A selector after a letter that has no variants draws nothing:
		// "Zoë" and "Zoë" + U+FE0F looked the same.
		"Zo\u00eb\ufe0f":       "Zo\u00eb" + `\uFE0F`,
		"Caf\u00e9\U000E0100":  "Caf\u00e9" + `\U000E0100`,
		"\u0416\ufe0e":         "\u0416" + `\uFE0E`,
		"keycap 1\ufe0f\u20e3": "",
		"info \u2139\ufe0f":    "",
	} {
		got, hidden := visible(in)
		if want == "" {
			require.False(t, hidden, "%q", in)
			require.Equal(t, in, got)
			continue
		}
		require.True(t, hidden, "%q", in)
		require.Equal(t, want, got)
	}
	fields := argFields([]byte(`{"invoice_id":"INV-\u202e8402","pay\u200bee":"x"}`))
	require.True(t, fields[0].Hidden)
	require.True(t, fields[1].Hidden)
	require.Equal(t, `pay\u200Bee`, fields[1].Path)
}

// TestCurrencyNoteFromTheAmountsOwnObject: the currency beside an amount is
// looked up in the amount's own object, by its exact key (case aside), not
// by re-splitting a dotted path or lower-casing the amount's name.
func TestCurrencyNoteFromTheAmountsOwnObject(t *testing.T) {
	t.Parallel()
	note := func(args, path string) string {
		for _, f := range argFields([]byte(args)) {
			if f.Path == path {
				return f.Note
			}
		}
		t.Fatalf("no field %s in %s", path, args)
		return ""
	}
	require.Equal(t, "minor units: JPY 500", note(`{"Fee_Minor":500,"Fee_Currency":"JPY","currency":"EUR"}`, "Fee_Minor"))
	require.Equal(t, "minor units: JPY 100,000", note(`{"fee.info":{"amount_minor":100000,"currency":"JPY"},"fee":{"info":{"currency":"BHD"}}}`, `["fee.info"].amount_minor`))
	require.Equal(t, "minor units: EUR 49.00", note(`{"amount_minor":4900,"currency":"EUR"}`, "amount_minor"))
	require.Equal(t, "minor units: EUR 1.50", note(`{"fee_minor":150,"fee_currency":"EUR","currency":"JPY"}`, "fee_minor"))
}

// TestDifferentArgsRenderDifferently: the approver signs a fingerprint over
// the arguments' structure, so two different argument objects must never
// show as the same table. Keys were joined with "." and "[i]" unquoted
// ({"meta":{"to":…}} and {"meta.to":…} showed one row, meta.to), and a
// string that reads as another JSON value showed as that value ("false",
// which a downstream may read as true, looked like false).
func TestDifferentArgsRenderDifferently(t *testing.T) {
	t.Parallel()
	c := New(nil, Options{})
	tags := regexp.MustCompile(`<[^>]*>`)
	shown := func(args string) string {
		var b strings.Builder
		require.NoError(t, c.pages["list"].ExecuteTemplate(&b, "args", argFields([]byte(args))))
		return tags.ReplaceAllString(b.String(), " ")
	}
	for _, pair := range [][2]string{
		{`{"meta":{"to":"alice"}}`, `{"meta.to":"alice"}`},
		{`{"lines":[{"sku":"A"}]}`, `{"lines[0]":{"sku":"A"}}`},
		{`{"a":{"b":1}}`, `{"a":{"b ":1}}`},
		{`{"":{"x":1}}`, `{"x":1}`},
		{`{"notify":false}`, `{"notify":"false"}`},
		{`{"cc":null}`, `{"cc":"null"}`},
		{`{"tags":[]}`, `{"tags":"[]"}`},
		{`{"meta":{}}`, `{"meta":"{}"}`},
		{`{"n":12}`, `{"n":"12"}`},
		{`{"s":""}`, `{"s":" "}`},
	} {
		require.NotEqual(t, shown(pair[0]), shown(pair[1]), "%s and %s look the same", pair[0], pair[1])
	}
	// Plain keys and plain text read as before.
	require.Equal(t, "amount_minor", argFields([]byte(`{"amount_minor":1}`))[0].Path)
	require.Equal(t, "fee.fee_minor", argFields([]byte(`{"fee":{"fee_minor":1}}`))[0].Path)
	require.Equal(t, "lines[0].sku", argFields([]byte(`{"lines":[{"sku":"A"}]}`))[0].Path)
	require.Equal(t, "Receipt", argFields([]byte(`{"subject":"Receipt"}`))[0].Value)
}
