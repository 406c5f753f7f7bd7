package audit

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/clients/go/fingerprint"
)

// TestJCSWriterMatchesCanonicalize: the receipts' own writer gives the
// bytes fingerprint.Canonicalize (the project's RFC 8785) gives for the same
// document, for texts with every kind of escape, characters beyond ASCII
// and beyond U+FFFF (whose keys sort by UTF-16), nulls and no facts; and it
// refuses invalid UTF-8 as Canonicalize does.
func TestJCSWriterMatchesCanonicalize(t *testing.T) {
	texts := []string{"", "plain", "q\"b\\s/t\tn\nr\rb\bf\fc\x01\x1f\x7f", "é 😀 \u2028 \u2029 \ufeff", "<&>", "\x00"}
	keys := []string{"a", "b", "é", "\ufb01", "😀", "\uffff", "a_null", "Z"}
	for i, s := range texts {
		facts := map[string]*string{}
		for j, k := range keys {
			v := texts[(i+j)%len(texts)]
			if j%3 == 0 {
				facts[k] = nil
			} else {
				facts[k] = &v
			}
		}
		for _, f := range []map[string]*string{facts, nil} {
			e := Event{OperationID: "op_" + s, Type: s, Actor: s, ToState: s, Detail: s, Facts: f}
			got, err := EventDoc(e)
			require.NoError(t, err)
			generic := map[string]any{}
			for k, v := range f {
				if v == nil {
					generic[k] = nil
				} else {
					generic[k] = *v
				}
			}
			want, err := fingerprint.Canonicalize(map[string]any{"actor": s, "detail": s, "facts": generic, "op": "op_" + s, "to": s, "type": s, "v": 2})
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
			if len(f) > 0 {
				ft, err := FactsText(f)
				require.NoError(t, err)
				wantFacts, err := fingerprint.Canonicalize(generic)
				require.NoError(t, err)
				require.Equal(t, string(wantFacts), ft)
			}
		}
	}
	_, err := EventDoc(Event{Detail: "\xff"})
	require.Error(t, err)
	bad := "\xfe"
	_, err = FactsText(map[string]*string{"k": &bad})
	require.Error(t, err)
}
