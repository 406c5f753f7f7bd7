package server_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/clients/go/fingerprint"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestPrepareConcurrentTwinsMakeOneOperation fires 100 identical Prepares at
// once through two servers sharing one database: the unique (tenant, tool,
// key) insert must let exactly one of them create the operation and answer
// every other with that same operation.
func TestPrepareConcurrentTwinsMakeOneOperation(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	servers := []*harness.Server{
		env.StartServer(harness.ServerOptions{NoReconciler: true}),
		env.StartServer(harness.ServerOptions{NoReconciler: true}),
	}
	key := env.Key("acme", "agent")
	idem := harness.Unique("twins")

	const n = 100
	resps := make([]*opledgerv1.PrepareResponse, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		c := servers[i%len(servers)].Client
		wg.Go(func() {
			<-start
			resps[i], errs[i] = c.Prepare(harness.Ctx(key, idem),
				&opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 4900)})
		})
	}
	close(start)
	wg.Wait()

	created := 0
	var id, fp string
	for i := range n {
		require.NoError(t, errs[i], "call %d", i)
		op := resps[i].GetOperation()
		if id == "" {
			id, fp = op.GetId(), op.GetFingerprint()
		}
		require.Equal(t, id, op.GetId(), "call %d got another operation", i)
		require.Equal(t, fp, op.GetFingerprint(), "call %d", i)
		if !resps[i].GetReplayed() {
			created++
		}
	}
	require.Equal(t, 1, created, "exactly one call creates the operation; the others replay it")

	for _, s := range servers {
		g := get(t, s.Client, key, id, true)
		require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, g.GetOperation().GetState())
		require.Len(t, g.GetEvents(), 1, "one operation, prepared once")
		require.Equal(t, opledgerv1.EventType_EVENT_TYPE_PREPARED, g.GetEvents()[0].GetType())
	}
}

// TestPrepareKeyReusedWithOtherArgs changes the amount under an existing key:
// the second request is refused and the stored operation keeps the first
// request's args and fingerprint.
func TestPrepareKeyReusedWithOtherArgs(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	key := env.Key("acme", "agent")
	idem := harness.Unique("reuse")

	first := prepare(t, c, key, idem, "pay_invoice", invoiceArgs(t, 4900))
	require.False(t, first.GetReplayed())

	_, err := c.Prepare(harness.Ctx(key, idem), &opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 49000)})
	requireReason(t, err, codes.AlreadyExists, "IDEMPOTENCY_KEY_REUSED")

	// The same args still replay: the refusal changed nothing.
	again := prepare(t, c, key, idem, "pay_invoice", invoiceArgs(t, 4900))
	require.True(t, again.GetReplayed())
	require.Equal(t, first.GetOperation().GetId(), again.GetOperation().GetId())

	stored := get(t, c, key, first.GetOperation().GetId(), true).GetOperation()
	require.Equal(t, first.GetOperation().GetFingerprint(), stored.GetFingerprint())
	require.Equal(t, 4900.0, stored.GetArgs().GetFields()["amount_minor"].GetNumberValue())
	require.True(t, proto.Equal(invoiceArgs(t, 4900), stored.GetArgs()), "stored args: %v", stored.GetArgs())
}

// TestPrepareKeyScope checks that an idempotency key is scoped by tenant and
// tool: the same key in another tenant or for another tool is a different
// operation, while two agents of one tenant share it.
func TestPrepareKeyScope(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	acme, globex := env.Key("acme", "agent"), env.Key("globex", "agent")
	idem := harness.Unique("scope")

	a := prepare(t, c, acme, idem, "pay_invoice", invoiceArgs(t, 4900))
	b := prepare(t, c, globex, idem, "pay_invoice", invoiceArgs(t, 4900))
	e := prepare(t, c, acme, idem, "send_email", emailArgs(t, "Paid."))
	for _, r := range []*opledgerv1.PrepareResponse{a, b, e} {
		require.False(t, r.GetReplayed())
	}
	require.NotEqual(t, a.GetOperation().GetId(), b.GetOperation().GetId())
	require.NotEqual(t, a.GetOperation().GetId(), e.GetOperation().GetId())
	require.NotEqual(t, b.GetOperation().GetId(), e.GetOperation().GetId())
	// The tenant is part of the fingerprint.
	require.NotEqual(t, a.GetOperation().GetFingerprint(), b.GetOperation().GetFingerprint())

	other := prepare(t, c, env.Key("acme", "agent"), idem, "pay_invoice", invoiceArgs(t, 4900))
	require.True(t, other.GetReplayed(), "the key belongs to the tenant, not to one principal")
	require.Equal(t, a.GetOperation().GetId(), other.GetOperation().GetId())
}

// TestPrepareRefusals sends malformed Prepares. Each must be refused with its
// documented code and reason, and must reserve nothing: the same key with
// valid args afterwards creates a new operation.
func TestPrepareRefusals(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true})
	c := srv.Client
	key := env.Key("acme", "agent")

	// requireNothingReserved proves the refusal stored nothing under idem.
	requireNothingReserved := func(t *testing.T, idem string) {
		t.Helper()
		r := prepare(t, c, key, idem, "pay_invoice", mustStruct(t, map[string]any{"invoice_id": harness.Unique("INV"), "amount_minor": 4900, "currency": "EUR"}))
		require.False(t, r.GetReplayed(), "the refused request must not have reserved the key")
	}
	without := func(m map[string]any, k string) map[string]any {
		out := map[string]any{}
		for kk, v := range m {
			if kk != k {
				out[kk] = v
			}
		}
		return out
	}
	valid := map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "EUR"}
	with := func(k string, v any) map[string]any {
		out := without(valid, k)
		out[k] = v
		return out
	}

	t.Run("key missing", func(t *testing.T) {
		t.Parallel()
		_, err := c.Prepare(harness.Ctx(key, ""), &opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 4900)})
		requireReason(t, err, codes.InvalidArgument, "IDEMPOTENCY_KEY_MISSING")
	})

	for name, values := range map[string][]string{
		"key empty":    {""},
		"key too long": {strings.Repeat("k", 256)},
		"key repeated": {harness.Unique("first"), harness.Unique("second")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			md := metadata.Pairs("authorization", "Bearer "+key)
			for _, v := range values {
				md.Append("idempotency-key", v)
			}
			_, err := c.Prepare(metadata.NewOutgoingContext(t.Context(), md),
				&opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 4900)})
			st := requireReason(t, err, codes.InvalidArgument, "IDEMPOTENCY_KEY_INVALID")
			require.Contains(t, badRequestFields(st), "metadata.idempotency-key")
			if len(values) > 1 {
				requireNothingReserved(t, values[0])
			}
		})
	}

	t.Run("key of 255 characters accepted", func(t *testing.T) {
		t.Parallel()
		requireNothingReserved(t, strings.Repeat("k", 254)+"z")
	})

	t.Run("key not ASCII", func(t *testing.T) {
		t.Parallel()
		// grpc-go refuses to send a non-ASCII metadata value, but other
		// clients send what they are given, so speak HTTP/2 directly.
		err := rawPrepare(t, srv.Addr, key, "clé", &opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 4900)})
		requireReason(t, err, codes.InvalidArgument, "IDEMPOTENCY_KEY_INVALID")
		// The same hand-made request with an ASCII key goes through, so the
		// refusal above is about the key.
		require.NoError(t, rawPrepare(t, srv.Addr, key, harness.Unique("raw"),
			&opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 4900)}))
	})

	refusals := []struct {
		name    string
		tool    string
		version string
		args    map[string]any
		code    codes.Code
		reason  string
		field   string
	}{
		{"tool unknown", "pay_invoices", "1", valid, codes.InvalidArgument, "TOOL_UNKNOWN", "tool"},
		{"tool unknown without version", "pay_invoices", "", valid, codes.InvalidArgument, "TOOL_UNKNOWN", "tool"},
		{"tool version unknown", "pay_invoice", "2", valid, codes.InvalidArgument, "TOOL_VERSION_UNKNOWN", "tool_version"},
		{"amount zero", "pay_invoice", "1", with("amount_minor", 0), codes.InvalidArgument, "ARGS_INVALID", "args/amount_minor"},
		{"currency lower case", "pay_invoice", "1", with("currency", "eur"), codes.InvalidArgument, "ARGS_INVALID", "args/currency"},
		{"field missing", "pay_invoice", "1", without(valid, "invoice_id"), codes.InvalidArgument, "ARGS_INVALID", "args/invoice_id"},
		{"field extra", "pay_invoice", "1", with("memo", "rush"), codes.InvalidArgument, "ARGS_INVALID", "args/memo"},
		// PostgreSQL cannot store the NUL character in jsonb: refused, not
		// INTERNAL (found by FuzzRequestPath).
		{"a NUL in a string", "send_email", "1", map[string]any{"to": "ap@example.com", "subject": "Invoice \x00", "body": "hi"},
			codes.InvalidArgument, "ARGS_INVALID", "args/subject"},
		{"a NUL in a member name", "send_email", "1", map[string]any{"to": "ap@example.com", "subject": "s", "body": "hi", "x\x00": "y"},
			codes.InvalidArgument, "ARGS_INVALID", "args"},
		{"args too large", "send_email", "1",
			map[string]any{"to": "ap@example.com", "subject": "big", "body": strings.Repeat("x", 70_000)},
			codes.ResourceExhausted, "ARGS_TOO_LARGE", ""},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			idem := harness.Unique("refused")
			_, err := c.Prepare(harness.Ctx(key, idem), &opledgerv1.PrepareRequest{Tool: tc.tool, ToolVersion: tc.version, Args: mustStruct(t, tc.args)})
			st := requireReason(t, err, tc.code, tc.reason)
			if tc.field != "" {
				require.Contains(t, badRequestFields(st), tc.field)
			}
			requireNothingReserved(t, idem)
		})
	}

	t.Run("unknown tool and version name what is configured", func(t *testing.T) {
		t.Parallel()
		_, err := c.Prepare(harness.Ctx(key, harness.Unique("typo")), &opledgerv1.PrepareRequest{Tool: "pay_invoices", Args: invoiceArgs(t, 4900)})
		st := requireReason(t, err, codes.InvalidArgument, "TOOL_UNKNOWN")
		require.Equal(t, `no tool named "pay_invoices" is configured; configured tools: pay_invoice, send_email (ListTools describes them)`, st.Message())
		_, err = c.Prepare(harness.Ctx(key, harness.Unique("typo")), &opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "2", Args: invoiceArgs(t, 4900)})
		st = requireReason(t, err, codes.InvalidArgument, "TOOL_VERSION_UNKNOWN")
		require.Equal(t, `tool "pay_invoice" has no version "2"; its versions: 1 (leave tool_version empty for the current one)`, st.Message())
	})

	t.Run("message too large", func(t *testing.T) {
		t.Parallel()
		idem := harness.Unique("huge")
		args := mustStruct(t, map[string]any{"to": "ap@example.com", "subject": "huge", "body": strings.Repeat("x", 2<<20)})
		_, err := c.Prepare(harness.Ctx(key, idem), &opledgerv1.PrepareRequest{Tool: "send_email", ToolVersion: "1", Args: args})
		// gRPC's transport refuses the message before any opledger code
		// runs, so there is no ErrorInfo to check: the code is all there is.
		require.Equal(t, codes.ResourceExhausted, statusCode(err), "%v", err)
		requireNothingReserved(t, idem)
	})
}

// TestFingerprint checks that Prepare's fingerprint is the published v1
// fingerprint, which clients can compute themselves, and that it does not
// depend on the server process: after a restart the key replays.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	key := env.Key("acme", "agent")
	idem := harness.Unique("fp")
	args := map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900.0, "currency": "EUR"}
	want, err := fingerprint.Compute(fingerprint.Input{
		Method: "/opledger.v1.LedgerService/Prepare", Tenant: "acme", Tool: "pay_invoice", ToolVersion: "1", Args: args})
	require.NoError(t, err)

	first := env.StartServer(harness.ServerOptions{NoReconciler: true})
	r1 := prepare(t, first.Client, key, idem, "pay_invoice", mustStruct(t, args))
	require.False(t, r1.GetReplayed())
	require.Equal(t, want, r1.GetOperation().GetFingerprint())
	first.Stop()

	second := env.StartServer(harness.ServerOptions{NoReconciler: true})
	r2 := prepare(t, second.Client, key, idem, "pay_invoice", mustStruct(t, args))
	require.True(t, r2.GetReplayed())
	require.Equal(t, r1.GetOperation().GetId(), r2.GetOperation().GetId())
	require.Equal(t, want, r2.GetOperation().GetFingerprint())

	// An empty tool_version means the current version and fingerprints as
	// such, so it replays too.
	r3, err := second.Client.Prepare(harness.Ctx(key, idem), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: mustStruct(t, args)})
	require.NoError(t, err)
	require.True(t, r3.GetReplayed())
	require.Equal(t, want, r3.GetOperation().GetFingerprint())
}

// TestRefusedPrepareNamesTheKeysOperation: a Prepare refused before it
// records anything (an unknown tool version, args the schema refuses) under
// a key that already names an operation says which: the refusal is about
// this request, while the key's earlier call (under a tools file that has
// changed since, say) may have taken effect, and a client must not read
// the refusal as "nothing happened".
func TestRefusedPrepareNamesTheKeysOperation(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true})
	agent := env.Key("acme", "agent")
	sent, err := srv.Client.Prepare(harness.Ctx(agent, "named-1"), &opledgerv1.PrepareRequest{Tool: "send_email", Args: emailArgs(t, "x"), Execute: true})
	require.NoError(t, err)
	id := sent.GetOperation().GetId()
	operationOf := func(st *status.Status) string {
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				return info.GetMetadata()["operation_id"]
			}
		}
		return ""
	}

	_, err = srv.Client.Prepare(harness.Ctx(agent, "named-1"), &opledgerv1.PrepareRequest{Tool: "send_email", ToolVersion: "9", Args: emailArgs(t, "x")})
	require.Equal(t, id, operationOf(requireReason(t, err, codes.InvalidArgument, "TOOL_VERSION_UNKNOWN")))
	bad, err := structpb.NewStruct(map[string]any{"to": 7})
	require.NoError(t, err)
	_, err = srv.Client.Prepare(harness.Ctx(agent, "named-1"), &opledgerv1.PrepareRequest{Tool: "send_email", Args: bad})
	require.Equal(t, id, operationOf(requireReason(t, err, codes.InvalidArgument, "ARGS_INVALID")))

	_, err = srv.Client.Prepare(harness.Ctx(agent, "named-2"), &opledgerv1.PrepareRequest{Tool: "send_email", ToolVersion: "9", Args: emailArgs(t, "x")})
	require.Empty(t, operationOf(requireReason(t, err, codes.InvalidArgument, "TOOL_VERSION_UNKNOWN")), "a key that names nothing")
}
