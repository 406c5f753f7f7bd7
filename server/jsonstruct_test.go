package server

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// jsonStructSeeds are stored arguments and results as PostgreSQL's jsonb
// prints them, and the corners of the grammar.
var jsonStructSeeds = []string{
	`{}`,
	`{"amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048"}`,
	`{"id": "ch_0123", "object": "charge", "request": {"amount_minor": 4900, "tags": ["a", "b", []]}, "created": 1700000000, "refunded": false, "note": null}`,
	` { "a" : [ 1 , -2.5e3 , 0.1 , 1E+2 , -0 ] , "b" : { } } `,
	`{"esc": "quote \" slash \/ back \\ \b\f\n\r\t \u00e9 \ud83d\ude00 end"}`,
	`{"ünï": "çødé ✓ 😀"}`,
	`{"big": 1e308, "tiny": 5e-324, "under": 1e-400}`,
	`{"over": 1e400}`,
	`{"lone": "\ud83d"}`,
	`{"lone": "\ude00x"}`,
	`{"dup": 1, "dup": 2}`,
	`{"a": 01}`,
	`{"a": 1.}`,
	`{"a": .5}`,
	`{"a": +1}`,
	`{"a": tru}`,
	`{"a": truex}`,
	`{"a": [1,]}`,
	`{"a": 1,}`,
	`{"a" 1}`,
	`{"a": "tab	inside"}`,
	`{"a": "\x"}`,
	`{"a": "\u12"}`,
	"{\"a\": \"\xff\"}",
	`{"a": 1} x`,
	`{"a": 1 "b": 2}`,
	`{"x": {"a": 1 "b": 2}}`,
	`{"x": [1 2]}`,
	`[1]`,
	`"s"`,
	``,
	`{"a": {"b": {"c": {"d": [[[[{"e": true}]]]]}}}}`,
}

// FuzzJSONStruct checks jsonStruct against protojson, which it replaces:
// the same inputs accepted, the same messages built.
func FuzzJSONStruct(f *testing.F) {
	for _, s := range jsonStructSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &structpb.Struct{}
		wantErr := protojson.Unmarshal(b, want)
		got, err := jsonStruct(b)
		if wantErr != nil {
			require.Error(t, err, "protojson refused %q: %v", b, wantErr)
			return
		}
		require.NoError(t, err, "protojson accepted %q", b)
		require.True(t, proto.Equal(want, got), "%q:\nprotojson %v\njsonStruct %v", b, want, got)
	})
}

func TestJSONStructDepth(t *testing.T) {
	t.Parallel()
	deep := func(n int) []byte {
		return []byte(`{"a":` + strings.Repeat(`[`, n) + strings.Repeat(`]`, n) + `}`)
	}
	for _, n := range []int{1, 100, maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		want := &structpb.Struct{}
		wantErr := protojson.Unmarshal(deep(n), want)
		got, err := jsonStruct(deep(n))
		if wantErr != nil {
			require.Error(t, err, "depth %d", n)
			continue
		}
		require.NoError(t, err, "depth %d", n)
		require.True(t, proto.Equal(want, got), "depth %d", n)
	}
}

// TestJSONStructContainers checks that each container refuses a missing
// separator itself, rather than relying on the top level's check for
// trailing bytes.
func TestJSONStructContainers(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{"a": 1 "b": 2}`, `{"a": 1`, `{"a": {"b": 1 "c": 2}}`} {
		_, err := (&jsonDecoder{b: []byte(in)}).object(1)
		require.Error(t, err, in)
	}
	for _, in := range []string{`[1 2]`, `[1,`, `[[1] [2]]`} {
		_, err := (&jsonDecoder{b: []byte(in)}).list(1)
		require.Error(t, err, in)
	}
	s, err := (&jsonDecoder{b: []byte(`{"a": [1, {"b": []}], "c": {}}`)}).object(1)
	require.NoError(t, err)
	require.Len(t, s.GetFields(), 2)
}

// BenchmarkStructOf compares jsonStruct with protojson on a stored charge
// result, the largest Struct of execute-new's answer.
func BenchmarkStructOf(b *testing.B) {
	in := []byte(`{"id": "ch_0123456789abcdef01234567", "object": "charge", "status": "succeeded", "amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048", "idempotency_key": "opk_0123456789abcdef0123456789abcdef0123456", "request": {"amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048"}, "created": 1700000000}`)
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := &structpb.Struct{}
			if err := protojson.Unmarshal(in, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jsonStruct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonStruct(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
