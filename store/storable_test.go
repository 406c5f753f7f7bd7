package store_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/store"
)

// FuzzStorableIsStored holds the rule the ledger stores every downstream
// answer by (executor.Object, then executor.Storable; a reference by
// executor.StorableText) against PostgreSQL itself: whatever a downstream
// sends, what is stored is accepted as jsonb (text), and an answer that
// PostgreSQL accepts as it is is stored unchanged. An answer jsonb refuses
// would fail the outcome's statement on every attempt and leave the
// operation unresolved. What is stored is nested at most
// executor.MaxStoredDepth levels deep, whatever PostgreSQL accepts (it
// accepts thousands), so "stored unchanged" holds for answers within that
// depth: a deeper part is stored as a string of its text, so that every
// client's protobuf runtime can decode the operation.
func FuzzStorableIsStored(f *testing.F) {
	for _, s := range []string{
		`{"id":"ch_1","amount_minor":4900,"currency":"EUR"}`,
		`{"a":"x\u0000y","a\u0000":1}`,
		`{"a":"\ud800","b":"\udc00\ud83d\ude00","c":"\\u0000"}`,
		"{\"a\":\"x\xff\xed\xa0\x80\"}",
		`{"n":[1e-16383,1e-16384,1e131071,1e131072,0e-99999,0.0001e131076,-1.5E+200000]}`,
		"oops\x00\xff",
		`[1,"two",{"three":3}]`,
		`{"id":"ch_1","x":` + strings.Repeat("[", 60) + `"\u0000",1e-20000` + strings.Repeat("]", 60) + `}`,
		`{"a":` + strings.Repeat(`{"b":`, 18) + `{}` + strings.Repeat("}", 18) + `}`, // 20 levels: kept
		`{"a":` + strings.Repeat(`{"b":`, 19) + `{}` + strings.Repeat("}", 19) + `}`, // 21: the innermost {} becomes "{}"
		"",
	} {
		f.Add([]byte(s))
	}
	st, err := store.Open(f.Context(), store.Config{URL: pgtest.NewDatabase(f), MaxConns: 2})
	require.NoError(f, err)
	f.Cleanup(st.Close)
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := t.Context()
		text := executor.StorableText(string(b))
		require.NoError(t, st.Exec(ctx, "SELECT $1::text", text), "%q", text)
		in := executor.Object(b)
		if in == nil {
			return
		}
		out := executor.Storable(in)
		require.True(t, json.Valid(out), "%q", out)
		require.NoError(t, st.Exec(ctx, "SELECT $1::text::jsonb", string(out)), "Storable(%q) = %q", in, out)
		require.LessOrEqual(t, depth(out), executor.MaxStoredDepth, "Storable(%q) = %q", in, out)
		if depth(in) <= executor.MaxStoredDepth && st.Exec(ctx, "SELECT $1::text::jsonb", string(in)) == nil {
			require.Equal(t, string(in), string(out), "an answer PostgreSQL stores as it is is kept as it is")
		}
	})
}

// depth is the deepest level of objects and arrays in the valid JSON text
// b (the top level is 1).
func depth(b []byte) int {
	level, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			level++
			deepest = max(deepest, level)
		case '}', ']':
			level--
		}
	}
	return deepest
}
