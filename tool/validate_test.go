package tool

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
)

func loadExamples(t *testing.T) *Registry {
	t.Helper()
	r, err := Load("../examples/tools.yaml", fakeEnv(nil))
	require.NoError(t, err)
	return r
}

func TestExamplesFile(t *testing.T) {
	t.Parallel()
	r := loadExamples(t)
	require.Len(t, r.List(), 2)

	pay, err := r.Lookup("pay_invoice", "")
	require.NoError(t, err)
	require.Equal(t, "1", pay.Version)
	require.Equal(t, EffectSideEffect, pay.Effect)
	require.Equal(t, Approval{Required: true, Approvers: 1, TTL: 15 * time.Minute}, pay.Approval)
	require.Equal(t, ExecutorConfig{
		Tool: "pay_invoice", Type: "http", URL: "http://127.0.0.1:7070/charges",
		LookupURL: "http://127.0.0.1:7070/charges?idempotency_key={key}",
		Timeout:   10 * time.Second, DedupesKeys: true, LookupConsistent: true, ExternalRefField: "id",
		MaxAttempts: 3, Headers: map[string]string{}, KeyRetention: 24 * time.Hour,
	}, pay.Executor)

	mail, err := r.Lookup("send_email", "1")
	require.NoError(t, err)
	require.Equal(t, EffectSideEffect, mail.Effect)
	require.False(t, mail.Approval.Required)
	require.Equal(t, "http://127.0.0.1:7070/emails", mail.Executor.URL)
	require.False(t, mail.Executor.DedupesKeys)
	require.Empty(t, mail.Executor.LookupURL)
	require.Equal(t, 1, mail.Executor.MaxAttempts)
	require.Equal(t, 1, mail.Executor.WithDefaults().MaxAttempts)
	require.Equal(t, "id", mail.Executor.ExternalRefField)
}

func TestExamplesFileEnv(t *testing.T) {
	t.Parallel()
	r, err := Load("../examples/tools.yaml", fakeEnv(map[string]string{"OPLEDGER_FAKEPAY_URL": "http://127.0.0.1:4242"}))
	require.NoError(t, err)
	pay, err := r.Lookup("pay_invoice", "1")
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:4242/charges", pay.Executor.URL)
	require.Equal(t, "http://127.0.0.1:4242/charges?idempotency_key={key}", pay.Executor.LookupURL)
}

func TestExamplesValidateArgs(t *testing.T) {
	t.Parallel()
	r := loadExamples(t)
	type field struct{ field, contains string }
	tests := []struct {
		name, tool string
		args       any
		want       []field // nil means valid
	}{
		{"pay ok", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900.0, "currency": "EUR"}, nil},
		{"pay ok as int", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR"}, nil},
		{"pay ok as json.Number", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": json.Number("4900"), "currency": "EUR"}, nil},
		{"pay ok large integral float", "pay_invoice", map[string]any{"invoice_id": "I", "amount_minor": 1e21, "currency": "USD"}, nil},
		{"pay amount zero", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": 0.0, "currency": "EUR"},
			[]field{{"/amount_minor", "> 0"}}},
		{"pay amount negative", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": -5.0, "currency": "EUR"},
			[]field{{"/amount_minor", ""}}},
		{"pay amount fractional", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900.5, "currency": "EUR"},
			[]field{{"/amount_minor", "integer"}}},
		{"pay amount string", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": "4900", "currency": "EUR"},
			[]field{{"/amount_minor", "integer"}}},
		{"pay currency lower case", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900.0, "currency": "eur"},
			[]field{{"/currency", "pattern"}}},
		{"pay currency too long", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900.0, "currency": "EURO"},
			[]field{{"/currency", "pattern"}}},
		{"pay missing field", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900.0},
			[]field{{"/currency", "required"}}},
		{"pay extra field", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900.0, "currency": "EUR", "memo": "x"},
			[]field{{"/memo", "not allowed"}}},
		{"pay empty invoice id", "pay_invoice", map[string]any{"invoice_id": "", "amount_minor": 4900.0, "currency": "EUR"},
			[]field{{"/invoice_id", ""}}},
		{"pay several problems", "pay_invoice", map[string]any{"amount_minor": 0.0, "currency": "eur", "x": true},
			[]field{{"/amount_minor", ""}, {"/currency", ""}, {"/invoice_id", "required"}, {"/x", "not allowed"}}},
		{"pay nil args", "pay_invoice", nil,
			[]field{{"/amount_minor", "required"}, {"/currency", "required"}, {"/invoice_id", "required"}}},
		{"pay NaN", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": math.NaN(), "currency": "EUR"},
			[]field{{"/amount_minor", "finite"}}},
		{"pay Inf", "pay_invoice", map[string]any{"invoice_id": "INV-2048", "amount_minor": math.Inf(1), "currency": "EUR"},
			[]field{{"/amount_minor", "finite"}}},
		{"pay unsupported Go type", "pay_invoice", map[string]any{"invoice_id": []string{"x"}, "amount_minor": 1.0, "currency": "EUR"},
			[]field{{"/invoice_id", "unsupported"}}},
		{"pay args not an object", "pay_invoice", []any{1.0}, []field{{"", "object"}}},
		{"email ok", "send_email", map[string]any{"to": "ops@example.com", "subject": "Paid", "body": "Invoice paid."}, nil},
		{"email bad address", "send_email", map[string]any{"to": "not an address", "subject": "s", "body": "b"},
			[]field{{"/to", "email"}}},
		{"email missing body", "send_email", map[string]any{"to": "ops@example.com", "subject": "s"},
			[]field{{"/body", "required"}}},
		{"email extra field", "send_email", map[string]any{"to": "ops@example.com", "subject": "s", "body": "b", "cc": "x@y.z"},
			[]field{{"/cc", "not allowed"}}},
		{"email subject not string", "send_email", map[string]any{"to": "ops@example.com", "subject": 5.0, "body": "b"},
			[]field{{"/subject", "string"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tl, err := r.Lookup(tt.tool, "1")
			require.NoError(t, err)
			err = tl.ValidateArgs(tt.args)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			var ae *ArgsError
			require.ErrorAs(t, err, &ae)
			require.Len(t, ae.Violations, len(tt.want), "%v", ae)
			for i, w := range tt.want {
				require.Equal(t, w.field, ae.Violations[i].Field, "%v", ae)
				require.Contains(t, ae.Violations[i].Description, w.contains)
			}
		})
	}
}

func TestValidateArgsStructpb(t *testing.T) {
	t.Parallel()
	pay, err := loadExamples(t).Lookup("pay_invoice", "1")
	require.NoError(t, err)

	s, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR"})
	require.NoError(t, err)
	require.NoError(t, pay.ValidateArgs(s))
	require.NoError(t, pay.ValidateArgs(s.AsMap()))

	// AsMap would turn NaN into the string "NaN"; the Struct itself is refused.
	s.Fields["amount_minor"] = structpb.NewNumberValue(math.NaN())
	var ae *ArgsError
	require.ErrorAs(t, pay.ValidateArgs(s), &ae)
	require.Equal(t, "/amount_minor", ae.Violations[0].Field)

	s.Fields["amount_minor"] = &structpb.Value{}
	require.ErrorAs(t, pay.ValidateArgs(s), &ae)

	var nilStruct *structpb.Struct
	require.ErrorAs(t, pay.ValidateArgs(nilStruct), &ae)
	require.Len(t, ae.Violations, 3)

	// A value refused deep inside names its place as a JSON Pointer.
	deep, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-2048", "currency": "EUR",
		"a/b~c": []any{1, map[string]any{"x": 1}}})
	require.NoError(t, err)
	deep.Fields["a/b~c"].GetListValue().Values[1].GetStructValue().Fields["x"] = structpb.NewNumberValue(math.Inf(-1))
	require.ErrorAs(t, pay.ValidateArgs(deep), &ae)
	require.Equal(t, []Violation{{Field: "/a~1b~0c/1/x", Description: "is not a finite number"}}, ae.Violations)
}

func TestValidateArgsRawJSON(t *testing.T) {
	t.Parallel()
	pay, err := loadExamples(t).Lookup("pay_invoice", "1")
	require.NoError(t, err)
	require.NoError(t, pay.ValidateArgs(json.RawMessage(`{"invoice_id":"INV-2048","amount_minor":4900,"currency":"EUR"}`)))
	var ae *ArgsError
	require.ErrorAs(t, pay.ValidateArgs(json.RawMessage(`{"invoice_id":`)), &ae)
	require.ErrorAs(t, pay.ValidateArgs(json.RawMessage(`null`)), &ae)
	require.Len(t, ae.Violations, 3)
}

func TestValidateArgsDepthLimit(t *testing.T) {
	t.Parallel()
	r, err := Parse([]byte("tools:"+minimalTool), fakeEnv(nil))
	require.NoError(t, err)
	ping, err := r.Lookup("ping", "1")
	require.NoError(t, err)

	// nest(n) is args of n+1 levels: the args object holds n objects in one
	// another.
	nest := func(n int) map[string]any {
		v := map[string]any{}
		root := v
		for range n {
			next := map[string]any{}
			v["a"] = next
			v = next
		}
		return root
	}
	require.Equal(t, executor.MaxStoredDepth, maxArgsDepth, "args are held to the depth of stored answers")
	require.NoError(t, ping.ValidateArgs(nest(maxArgsDepth-1)))
	var ae *ArgsError
	require.ErrorAs(t, ping.ValidateArgs(nest(maxArgsDepth)), &ae)
	require.Equal(t, []Violation{{Field: strings.Repeat("/a", maxArgsDepth), Description: "nested deeper than 20 levels"}}, ae.Violations)

	// A Struct counts its levels as the plain value does, arrays as objects,
	// and a scalar inside the deepest level is no level of its own.
	for _, levels := range []int{maxArgsDepth, maxArgsDepth + 1} {
		s, err := structpb.NewStruct(nest(levels - 1))
		require.NoError(t, err)
		inner := s
		for range levels - 1 {
			inner = inner.Fields["a"].GetStructValue()
		}
		inner.Fields["n"] = structpb.NewNumberValue(1)
		list, err := structpb.NewStruct(map[string]any{"l": nestList(levels-1, "x")})
		require.NoError(t, err)
		for _, args := range []any{s, list, list.AsMap(), json.RawMessage(`{"l":` + strings.Repeat("[", levels-1) + `"x"` + strings.Repeat("]", levels-1) + `}`)} {
			if err := ping.ValidateArgs(args); levels <= maxArgsDepth {
				require.NoError(t, err, "%d levels", levels)
			} else {
				require.ErrorAs(t, err, &ae)
				require.Equal(t, "nested deeper than 20 levels", ae.Violations[0].Description)
			}
		}
	}

	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	require.ErrorAs(t, ping.ValidateArgs(cyclic), &ae)
}

// nestList is inner inside n arrays.
func nestList(n int, inner any) any {
	for range n {
		inner = []any{inner}
	}
	return inner
}

func TestValidateArgsWithoutSchema(t *testing.T) {
	t.Parallel()
	tl := &Tool{Name: "x", Version: "1"}
	err := tl.ValidateArgs(map[string]any{})
	require.Error(t, err)
	var ae *ArgsError
	require.False(t, errors.As(err, &ae), "a missing schema is a programming error, not bad args")
}

func TestArgsErrorMessage(t *testing.T) {
	t.Parallel()
	e := &ArgsError{Violations: []Violation{
		{Field: "", Description: "got array, want object"},
		{Field: "/amount_minor", Description: "must be > 0"},
		{Field: "/currency", Description: "is required"},
	}}
	require.Equal(t, "invalid args: (args): got array, want object; /amount_minor: must be > 0; /currency: is required", e.Error())
	require.Equal(t, "invalid args", (&ArgsError{}).Error())
}

// BenchmarkValidateArgs measures what the server does to every Prepare's
// args.
func BenchmarkValidateArgs(b *testing.B) {
	r, err := Load("../examples/tools.yaml", fakeEnv(nil))
	if err != nil {
		b.Fatal(err)
	}
	pay, err := r.Lookup("pay_invoice", "1")
	if err != nil {
		b.Fatal(err)
	}
	s, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := pay.ValidateArgs(s); err != nil {
			b.Fatal(err)
		}
	}
}
