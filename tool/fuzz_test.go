package tool

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzValidateArgs checks that validation never panics and only ever
// answers nil or an *ArgsError for decoded JSON.
func FuzzValidateArgs(f *testing.F) {
	r, err := Load("../examples/tools.yaml", fakeEnv(nil))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`,
		`{"invoice_id":"INV-2048","amount_minor":4900.5,"currency":"eur","x":[1,{"y":null}]}`,
		`{"to":"a@b.c","subject":"","body":"\u0000"}`,
		`[1e308,-0,"x",true,null]`,
		`"str"`,
	} {
		f.Add([]byte(seed))
	}
	tools := r.List()
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			t.Skip()
		}
		for _, tl := range tools {
			for _, args := range []any{v, json.RawMessage(data)} {
				err := tl.ValidateArgs(args)
				var ae *ArgsError
				if err != nil && (!errors.As(err, &ae) || len(ae.Violations) == 0) {
					t.Fatalf("%s: %q: unexpected error %v", tl.Name, data, err)
				}
			}
		}
	})
}
