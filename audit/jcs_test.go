package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
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

// TestDocHashFactsMatchesDocHash: the writers' path (facts listed in JCS
// order) gives the doc hash and facts text that DocHash and FactsText give
// for the same facts as a map, nulls and no facts included, and refuses a
// list out of order, a key twice, or invalid UTF-8.
func TestDocHashFactsMatchesDocHash(t *testing.T) {
	v := func(s string) *string { return &s }
	for _, m := range []map[string]*string{
		nil,
		{"a": v("x")},
		{"approvals_needed": v("0"), "approver": nil, "args_digest": v("ab"), "tenant": v("t\n\"é"), "😀": v("1"), "\uffff": nil},
	} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, fingerprint.CompareUTF16)
		var list []Fact
		for _, k := range keys {
			if m[k] == nil {
				list = append(list, Fact{Key: k, Null: true})
			} else {
				list = append(list, Fact{Key: k, Value: *m[k]})
			}
		}
		e := Event{OperationID: "op_1", Type: "PREPARED", Actor: "a\tb", ToState: "READY", Detail: "d"}
		doc, text, err := DocHashFacts(e, list)
		require.NoError(t, err)
		e.Facts = m
		wantDoc, err := DocHash(e)
		require.NoError(t, err)
		wantText, err := FactsText(m)
		require.NoError(t, err)
		require.Equal(t, wantDoc, doc)
		require.Equal(t, wantText, text)
	}
	for _, bad := range [][]Fact{
		{{Key: "b"}, {Key: "a"}},
		{{Key: "a"}, {Key: "a"}},
		{{Key: "\uffff"}, {Key: "😀"}}, // code-point order, not UTF-16's
		{{Key: "a", Value: "\xff"}},
	} {
		_, _, err := DocHashFacts(Event{}, bad)
		require.Error(t, err, "%q", bad)
	}
}

// canonicalCases are JSON texts on either side of canonicalJSON's subset.
var canonicalCases = []string{
	`{"id":"ch_1","object":"charge","amount_minor":4900,"request":{"b":1,"a":[1,2,{"z":null,"y":true}]},"created":1733350000}`,
	`{}`, `[]`, `[ ]`, `{ }`, ` {"a" : 1 , "b":[ 1 , 2 ] } `, `"s"`, `0`, `-1`, `123456789012345`, `1234567890123456`,
	`-0`, `01`, `1.0`, `1.5`, `1e2`, `1E2`, `-`, `true`, `false`, `null`, `tru`, `nul`,
	`{"a":1,"a":2}`, `{"b":1,"a":2,"b":3}`, `{"a\u0062":1,"ab":2}`, `{"\ud83d\ude00":1,"\uffff":2}`,
	`{"😀":1,"\uffff":2,"é":3,"e":4,"":5}`, `{"ﬁ":1,"😀":2}`, `"\u00e9"`, `"a\nb"`, `"é\u2028"`,
	"\"\xff\"", "{\"\xff\":1}", `"\ud800"`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`, `[1 2]`, `1 2`, `{"a":1}x`,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	`{"k":"` + "\x7f" + `"}`, `{"q":"a/b<&>"}`, "", " ", `{"a":1`, `[`, `"abc`,
}

// TestCanonicalJSONMatchesCanonicalize: Digest's fast path writes exactly
// what fingerprint.Canonicalize writes for every text it takes, takes the
// bench's charge (the common case), and Digest's answer, fast or not, is
// Canonicalize's.
func TestCanonicalJSONMatchesCanonicalize(t *testing.T) {
	for _, s := range append(canonicalCases, string(benchResult)) {
		checkCanonical(t, []byte(s))
	}
	_, ok := canonicalJSON(nil, benchResult)
	require.True(t, ok)
	_, ok = canonicalJSON(nil, []byte(canonicalCases[0]))
	require.True(t, ok)
}

func checkCanonical(t *testing.T, in []byte) {
	t.Helper()
	want, wantErr := fingerprint.Canonicalize(json.RawMessage(in))
	got, ok := canonicalJSON(make([]byte, 0, 4), in)
	if ok {
		require.NoError(t, wantErr, "%q", in)
		require.Equal(t, string(want), string(got), "%q", in)
	}
	d, err := Digest(in)
	if wantErr != nil {
		require.Error(t, err, "%q", in)
		return
	}
	require.NoError(t, err, "%q", in)
	sum := sha256.Sum256(want)
	require.Equal(t, hex.EncodeToString(sum[:]), d, "%q", in)
}

// FuzzCanonicalJSONMatchesCanonicalize is TestCanonicalJSONMatchesCanonicalize
// on any text.
func FuzzCanonicalJSONMatchesCanonicalize(f *testing.F) {
	for _, s := range canonicalCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkCanonical(t, in) })
}
