package server_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/types/known/emptypb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// callEveryMethod calls every LedgerService method, unary and streaming, with
// an empty request under ctx and hands each call's error to check. It reads
// the service descriptor, so an RPC added later is covered without editing
// the test. An empty message decodes as any request type, and the auth
// interceptor runs before the handler looks at it.
func callEveryMethod(t *testing.T, conn *grpc.ClientConn, ctx context.Context, check func(t *testing.T, err error)) {
	desc := opledgerv1.LedgerService_ServiceDesc
	require.NotEmpty(t, desc.Methods)
	for _, m := range desc.Methods {
		t.Run(m.MethodName, func(t *testing.T) {
			err := conn.Invoke(ctx, "/"+desc.ServiceName+"/"+m.MethodName, &emptypb.Empty{}, &emptypb.Empty{})
			check(t, err)
		})
	}
	for _, s := range desc.Streams {
		t.Run(s.StreamName, func(t *testing.T) {
			cs, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: s.StreamName, ServerStreams: s.ServerStreams, ClientStreams: s.ClientStreams},
				"/"+desc.ServiceName+"/"+s.StreamName)
			if err == nil {
				_ = cs.SendMsg(&emptypb.Empty{})
				_ = cs.CloseSend()
				err = cs.RecvMsg(&emptypb.Empty{})
			}
			check(t, err)
		})
	}
}

// TestAuthRequiredOnEveryMethod: no LedgerService method answers without a
// valid API key, while health checking and reflection need none.
func TestAuthRequiredOnEveryMethod(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true})

	t.Run("no key", func(t *testing.T) {
		callEveryMethod(t, srv.Conn, context.Background(), func(t *testing.T, err error) {
			requireReason(t, err, codes.Unauthenticated, "API_KEY_MISSING")
		})
	})
	t.Run("not a bearer key", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Basic dXNlcjpwYXNz")
		callEveryMethod(t, srv.Conn, ctx, func(t *testing.T, err error) {
			requireReason(t, err, codes.Unauthenticated, "API_KEY_MISSING")
		})
	})
	t.Run("wrong key", func(t *testing.T) {
		callEveryMethod(t, srv.Conn, harness.Ctx("opk_not-a-real-key", harness.Unique("k")), func(t *testing.T, err error) {
			requireReason(t, err, codes.Unauthenticated, "API_KEY_INVALID")
		})
	})
	// Two credentials are ambiguous: whichever one a server picked, the
	// caller could not tell which principal acted, so neither is used, even
	// when the first is valid.
	t.Run("two keys", func(t *testing.T) {
		valid := env.Key("t-"+harness.Unique("two"), "agent", "approver", "operator")
		ctx := metadata.AppendToOutgoingContext(harness.Ctx(valid, harness.Unique("k")), "authorization", "Bearer opk_not-a-real-key")
		callEveryMethod(t, srv.Conn, ctx, func(t *testing.T, err error) {
			requireReason(t, err, codes.Unauthenticated, "API_KEY_INVALID")
		})
	})

	t.Run("health without key", func(t *testing.T) {
		resp, err := healthpb.NewHealthClient(srv.Conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
		resp, err = healthpb.NewHealthClient(srv.Conn).Check(context.Background(),
			&healthpb.HealthCheckRequest{Service: opledgerv1.LedgerService_ServiceDesc.ServiceName})
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
	})
	t.Run("reflection without key", func(t *testing.T) {
		stream, err := reflectionpb.NewServerReflectionClient(srv.Conn).ServerReflectionInfo(context.Background())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))
		resp, err := stream.Recv()
		require.NoError(t, err)
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		require.Contains(t, names, opledgerv1.LedgerService_ServiceDesc.ServiceName)
		require.Contains(t, names, "grpc.health.v1.Health")
		require.NoError(t, stream.CloseSend())
	})
}

// TestRoles: each method admits only the roles the design gives it.
func TestRoles(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")

	_, err := c.Prepare(harness.Ctx(approver, harness.Unique("k")),
		&opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 4900)})
	st := requireReason(t, err, codes.PermissionDenied, "ROLE_REQUIRED")
	require.Equal(t, "Prepare needs a key with the agent role; this key has the approver role", st.Message())

	op := prepare(t, c, agent, harness.Unique("k"), "pay_invoice", invoiceArgs(t, 4900)).GetOperation()
	_, err = c.Approve(harness.Ctx(agent, ""), &opledgerv1.ApproveRequest{
		OperationId: op.GetId(), Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE})
	st = requireReason(t, err, codes.PermissionDenied, "ROLE_REQUIRED")
	require.Equal(t, "Approve needs a key with the approver role; this key has the agent role", st.Message())
	_, err = c.Execute(harness.Ctx(approver, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId()})
	requireReason(t, err, codes.PermissionDenied, "ROLE_REQUIRED")

	// Refusals changed nothing; the approver may read the operation.
	got := get(t, c, approver, op.GetId(), false).GetOperation()
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetState())
}

// TestTenantIsolation: another tenant's operation does not exist for you,
// whatever your roles, and refusing you leaves it untouched.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{NoReconciler: true}).Client
	agentA := env.Key("acme", "agent")
	agentB, approverB := env.Key("globex", "agent"), env.Key("globex", "approver")
	operatorB := env.Key("globex", "agent", "approver", "operator")

	op := prepare(t, c, agentA, harness.Unique("k"), "pay_invoice", invoiceArgs(t, 4900)).GetOperation()
	id := op.GetId()

	for _, key := range []string{agentB, approverB, operatorB} {
		_, err := c.Get(harness.Ctx(key, ""), &opledgerv1.GetRequest{OperationId: id, IncludeEvents: true})
		requireReason(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
	}
	for _, key := range []string{agentB, operatorB} {
		_, err := c.Execute(harness.Ctx(key, ""), &opledgerv1.ExecuteRequest{OperationId: id})
		requireReason(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
		_, err = c.Reconcile(harness.Ctx(key, ""), &opledgerv1.ReconcileRequest{OperationId: id})
		requireReason(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
	}
	_, err := c.Reconcile(harness.Ctx(operatorB, ""), &opledgerv1.ReconcileRequest{OperationId: id,
		Resolution: &opledgerv1.Resolution{Outcome: opledgerv1.State_STATE_SUCCEEDED, ExternalRef: "ch_x", Note: "cross-tenant"}})
	requireReason(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
	for _, key := range []string{approverB, operatorB} {
		_, err := c.Approve(harness.Ctx(key, ""), &opledgerv1.ApproveRequest{
			OperationId: id, Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE})
		requireReason(t, err, codes.NotFound, "OPERATION_NOT_FOUND")
	}

	got := get(t, c, agentA, id, true)
	require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, got.GetOperation().GetState())
	require.Len(t, got.GetEvents(), 1, "tenant B's calls left no trace")
}
