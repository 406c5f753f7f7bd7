package fingerprint

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// FuzzCanonicalize checks that canonical output is valid JSON and a fixed
// point: parsing it and canonicalizing again yields the same bytes. The seed
// corpus lives in testdata/fuzz/FuzzCanonicalize.
func FuzzCanonicalize(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`,
		`[1e21,1e-7,0.000001,-0,5e-324,1.7976931348623157e308,333333333.33333329]`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Skip()
		}
		first, err := Canonicalize(v)
		if err != nil {
			// encoding/json yields only finite float64s and valid UTF-8
			// (it substitutes U+FFFD), so every parsed value is
			// representable.
			t.Fatalf("Canonicalize(%q): %v", data, err)
		}
		if !json.Valid(first) {
			t.Fatalf("output is not JSON: %q", first)
		}
		var again any
		if err := json.Unmarshal(first, &again); err != nil {
			t.Fatalf("reparse %q: %v", first, err)
		}
		second, err := Canonicalize(again)
		if err != nil {
			t.Fatalf("Canonicalize(reparse of %q): %v", first, err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("not a fixed point:\n first %q\nsecond %q", first, second)
		}
		third, err := Canonicalize(json.RawMessage(data))
		if err != nil {
			t.Fatalf("Canonicalize(RawMessage %q): %v", data, err)
		}
		if !bytes.Equal(first, third) {
			t.Fatalf("RawMessage path differs:\n  any %q\n  raw %q", first, third)
		}
	})
}

// FuzzCompareUTF16 checks compareUTF16, which orders names without
// converting them, against the order of their UTF-16 encodings.
func FuzzCompareUTF16(f *testing.F) {
	for _, p := range [][2]string{
		{"\U0001F600", "\uFB33"}, {"\uE000", "\U00010000"}, {"\uD7FF", "\U00010000"}, {"a\U0001F600", "a\uFFFF"},
		{"\U0010FFFF", "\U00010000"}, {"ab", "a"}, {"", "a"}, {"€", "\r"}, {"\U0001F600x", "\U0001F600"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, c string) {
		if !utf8.ValidString(a) || !utf8.ValidString(c) {
			t.Skip()
		}
		want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(c)))
		if got := compareUTF16(a, c); got != want {
			t.Fatalf("compareUTF16(%q, %q) = %d, UTF-16 order says %d", a, c, got, want)
		}
	})
}
