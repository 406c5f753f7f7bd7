package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
)

// structFieldSeeds add to jsonStructSeeds what only the wire encoding has
// corners for: lengths of 128 bytes and more (a length of two bytes or
// three) for a name, a string, a member, an object and a list, at every
// level, and duplicate names after such a member.
var structFieldSeeds = []string{
	`{"` + strings.Repeat("k", 127) + `": 1}`,
	`{"` + strings.Repeat("k", 128) + `": 1, "` + strings.Repeat("k", 128) + `": 2}`,
	`{"` + strings.Repeat("k", 200) + `": 1, "b": 2, "b": 3}`,
	`{"a": "` + strings.Repeat("s", 20000) + `", "c": 1, "a": 2}`,
	`{"a": "` + strings.Repeat("é", 100) + `", "b": [` + strings.Repeat(`"xxxxxxxxxx", `, 30) + `{"d": {"e": "` + strings.Repeat("\\u00e9", 70) + `"}}]}`,
	`{"esc` + strings.Repeat(`\n`, 130) + `": {"x": 1}, "esc` + strings.Repeat(`\n`, 130) + `": 2}`,
	`{"a": {"b": {"c": [` + strings.Repeat(`1.5, `, 40) + `null, true, false, {}, []]}}}`,
	`{"a": ` + strings.Repeat(`[`, wireMaxDepth+1) + strings.Repeat(`]`, wireMaxDepth+1) + `}`,
	`{"a": ` + strings.Repeat(`[`, wireMaxDepth+1) + `x` + strings.Repeat(`]`, wireMaxDepth+1) + `}`,
}

// FuzzStructField checks appendStructField against jsonStruct: the same
// inputs refused, and for every other one bytes that decode to the Struct
// jsonStruct builds, of the size proto.Marshal gives that Struct, after
// whatever the buffer held.
func FuzzStructField(f *testing.F) {
	for _, s := range append(append([]string(nil), jsonStructSeeds...), structFieldSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkStructField(t, b) })
}

func TestStructFieldSeeds(t *testing.T) {
	t.Parallel()
	for _, s := range append(append([]string(nil), jsonStructSeeds...), structFieldSeeds...) {
		checkStructField(t, []byte(s))
	}
}

func checkStructField(t *testing.T, b []byte) {
	t.Helper()
	prefix, err := proto.Marshal(&opledgerv1.Operation{Id: "op_x"})
	require.NoError(t, err)
	want, wantErr := jsonStruct(b)
	got, err := appendStructField(append([]byte(nil), prefix...), argsField, b)
	if errors.Is(err, errTooDeep) {
		// The caller builds the Struct with jsonStruct itself, which decides.
		require.Equal(t, prefix, got, "%q: an object too deep changed the buffer", b)
		return
	}
	if wantErr != nil {
		require.Error(t, err, "jsonStruct refused %q: %v", b, wantErr)
		require.Equal(t, prefix, got, "%q: a refused object changed the buffer", b)
		return
	}
	require.NoError(t, err, "jsonStruct accepted %q", b)
	var m opledgerv1.Operation
	require.NoError(t, proto.Unmarshal(got, &m), "%q", b)
	require.Equal(t, "op_x", m.GetId())
	require.True(t, proto.Equal(want, m.GetArgs()), "%q:\njsonStruct %v\nwire       %v", b, want, m.GetArgs())
	require.Equal(t, proto.Size(&opledgerv1.Operation{Args: want}), len(got)-len(prefix), "%q: not the size proto.Marshal writes", b)
}

// TestOperationPBCarriesArgsAndResult checks an answer as a client reads it:
// marshalled and decoded, its args and result are the Structs of the stored
// JSON, for objects the wire encoding writes and for one nested too deep for
// it (built as a Struct instead), and no stored JSON is no field.
func TestOperationPBCarriesArgsAndResult(t *testing.T) {
	t.Parallel()
	deep := `{"a": ` + strings.Repeat(`[`, wireMaxDepth+5) + `"x"` + strings.Repeat(`]`, wireMaxDepth+5) + `}`
	for _, c := range []struct{ args, result string }{
		{`{"amount_minor": 4900, "currency": "EUR"}`, `{"id": "ch_1", "request": {"tags": ["a", null, true, 1.5]}}`},
		{`{"note": "` + strings.Repeat("n", 300) + `"}`, ``},
		{deep, `{"ok": true}`},
		{`{"b": 1}`, deep},
		{``, ``},
	} {
		op := ledger.Operation{ID: "op_1", Tenant: "t", Tool: "charge", State: string(ledger.StateSucceeded),
			Args: []byte(c.args), Result: []byte(c.result), CreatedAt: time.Unix(1, 0), ExternalRef: "ch_1"}
		wire, err := proto.Marshal(operationPB(op))
		require.NoError(t, err)
		var got opledgerv1.Operation
		require.NoError(t, proto.Unmarshal(wire, &got))
		require.Len(t, got.ProtoReflect().GetUnknown(), 0)
		require.Equal(t, "ch_1", got.GetExternalRef())
		for _, f := range []struct {
			stored string
			got    proto.Message
		}{{c.args, got.GetArgs()}, {c.result, got.GetResult()}} {
			if f.stored == "" {
				require.Nil(t, f.got)
				continue
			}
			want, err := jsonStruct([]byte(f.stored))
			require.NoError(t, err)
			require.True(t, proto.Equal(want, f.got), "%.60s", f.stored)
		}
	}
}

// BenchmarkAnswer compares what an answer with a stored charge's args and
// result costs to build and marshal, as Structs and as wire bytes.
func BenchmarkAnswer(b *testing.B) {
	op := ledger.Operation{ID: "op_0123456789abcdef", Tenant: "t", Tool: "charge", ToolVersion: "1", State: string(ledger.StateSucceeded),
		Args:      []byte(`{"amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048"}`),
		Result:    []byte(`{"id": "ch_0123456789abcdef01234567", "object": "charge", "status": "succeeded", "amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048", "idempotency_key": "opk_0123456789abcdef0123456789abcdef0123456", "request": {"amount_minor": 4900, "currency": "EUR", "invoice_id": "INV-2048"}, "created": 1700000000}`),
		CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(2, 0), ExternalRef: "ch_0123456789abcdef01234567"}
	b.Run("structs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pb := operationPB(op)
			pb.ProtoReflect().SetUnknown(nil)
			pb.Args, pb.Result = structOf(op.Args), structOf(op.Result)
			if _, err := proto.Marshal(pb); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(operationPB(op)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
