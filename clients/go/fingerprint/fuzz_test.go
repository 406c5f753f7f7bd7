package fingerprint

import (
	"bytes"
	"encoding/json"
	"testing"
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
