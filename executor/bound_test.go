package executor

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestBound: a body, a reference and a detail within the bounds are stored
// as Storable and StorableText make them; one beyond is stored cut, in the
// executor's truncation shape ({"raw": …, "truncated": true} for a body,
// "…[truncated]" at the end of a text), never longer than the bound, however
// the escapes and replacements inflate what is kept of it.
func TestBound(t *testing.T) {
	t.Parallel()
	at := `{"s":"` + strings.Repeat("a", MaxStoredBytes-8) + `"}`
	require.Len(t, at, MaxStoredBytes)
	got := Bound(Result{Body: json.RawMessage(at), ExternalRef: strings.Repeat("r", MaxStoredText), Detail: "d"})
	require.Equal(t, at, string(got.Body), "an object at the bound is kept")
	require.Equal(t, strings.Repeat("r", MaxStoredText), got.ExternalRef, "a text at the bound is kept")
	require.Equal(t, "d", got.Detail)

	for name, body := range map[string]string{
		"one byte over":            `{"s":"` + strings.Repeat("a", MaxStoredBytes-7) + `"}`,
		"many small numbers":       `{"n":[` + strings.Repeat("0,", 520_000) + `0]}`,
		"quotes to escape":         `{"s":"` + strings.Repeat(`\"`, MaxStoredBytes) + `"}`,
		"NULs to replace":          `{"s":"` + strings.Repeat(`\u0000`, MaxStoredBytes) + `"}`,
		"control characters":       `{"s":"` + strings.Repeat(`\u0001`, MaxStoredBytes) + `"}`,
		"bytes that are not UTF-8": "{\"s\":\"" + strings.Repeat("\xff", MaxStoredBytes) + "\"}",
		"an array, wrapped":        `[` + strings.Repeat("1,", MaxStoredBytes/2) + `1]`,
	} {
		b := Bound(Result{Body: json.RawMessage(body)}).Body
		require.LessOrEqual(t, len(b), MaxStoredBytes, name)
		var v struct {
			Raw       string `json:"raw"`
			Truncated bool   `json:"truncated"`
		}
		require.NoError(t, json.Unmarshal(b, &v), name)
		require.True(t, v.Truncated, name)
		require.NotEmpty(t, v.Raw, name)
		require.Equal(t, string(Storable(b)), string(b), "%s: what is stored is storable", name)
	}

	for name, s := range map[string]string{
		"ASCII":                strings.Repeat("x", MaxStoredText+1),
		"four-byte characters": strings.Repeat("😀", MaxStoredText),
		"NULs":                 strings.Repeat("\x00", MaxStoredText), // each becomes a 3-byte U+FFFD
	} {
		got := BoundText(s)
		require.LessOrEqual(t, len(got), MaxStoredText, name)
		require.True(t, strings.HasSuffix(got, "…[truncated]"), name)
		require.True(t, utf8.ValidString(got), "%s: cut at a character boundary", name)
		require.Equal(t, StorableText(got), got, name)
	}
}
