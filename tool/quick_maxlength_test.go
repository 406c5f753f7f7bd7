package tool

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuickSchemaHugeMaxLength: a maxLength the schema's metaschema allows
// (any non-negative integer) but beyond int64 is compiled by the library as
// its low 64 bits, here a negative int, so the library refuses every
// string; quickSchema read a negative bound as "no bound" and accepted
// them all.
func TestQuickSchemaHugeMaxLength(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{
		`{"type":"object","properties":{"memo":{"type":"string","maxLength":18446744073709551615}}}`,
		`{"type":"object","properties":{"memo":{"type":"string","maxLength":1e19}}}`,
		`{"type":"object","properties":{"memo":{"type":"string","maxLength":9223372036854775808}}}`,
	} {
		tl := quickTool(t, schema)
		var d any
		require.NoError(t, json.Unmarshal([]byte(`{"memo":"hello"}`), &d))
		v, aerr := normalizeArgs(d)
		require.Nil(t, aerr)
		libErr := tl.schema.Validate(v)
		if tl.quick != nil && tl.quick.accepts(v) {
			require.NoError(t, libErr, "quickSchema accepted what the library refuses, against %s", schema)
		}
		// What Prepare sees: ValidateArgs must give the library's verdict.
		require.Equal(t, libErr == nil, tl.ValidateArgs(v) == nil, "ValidateArgs disagrees with the library against %s (library: %v)", schema, libErr)
	}
}
