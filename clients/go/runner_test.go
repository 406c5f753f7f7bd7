package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	client "github.com/opledger/opledger/clients/go"
	"github.com/opledger/opledger/clients/go/internal/require"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
)

// TestToolOutcomeVectors checks ForModel against the vectors every client
// checks (clients/testdata/tool_outcomes.json), so the four clients hand a
// model the same bytes.
func TestToolOutcomeVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../testdata/tool_outcomes.json")
	require.NoError(t, err)
	var file struct {
		Vectors []struct {
			Name        string         `json:"name"`
			Status      string         `json:"status"`
			OperationID string         `json:"operation_id"`
			Reason      string         `json:"reason"`
			Message     string         `json:"message"`
			Result      map[string]any `json:"result"`
			ForModel    string         `json:"for_model"`
			Edit        *struct {
				Supersedes   string         `json:"supersedes"`
				OriginalArgs map[string]any `json:"original_args"`
				Args         map[string]any `json:"args"`
			} `json:"edit"`
		} `json:"vectors"`
		RefusalMessages []struct {
			Reason, Message string
			ForModel        string `json:"for_model_message"`
		} `json:"refusal_messages"`
		OperationDuplicate []struct {
			State, Message string
		} `json:"operation_duplicate"`
		ModelDescriptions []struct {
			Description, Summary string
			Want                 string `json:"model_description"`
		} `json:"model_descriptions"`
		KeyNamesEarlierCall []struct {
			State   string `json:"state"`
			Message string `json:"message"`
		} `json:"key_names_earlier_call"`
	}
	require.NoError(t, json.Unmarshal(raw, &file))
	require.NotEmpty(t, file.KeyNamesEarlierCall)
	for _, v := range file.KeyNamesEarlierCall {
		state, known := opledgerv1.State_value[v.State]
		if !known {
			n, err := strconv.Atoi(v.State)
			require.NoError(t, err, v.State)
			state = int32(n)
		}
		require.Equal(t, v.Message, client.KeyNamesEarlierCall(opledgerv1.State(state)), v.State)
	}
	require.GreaterOrEqual(t, len(file.Vectors), 6)
	for _, v := range file.Vectors {
		var op *opledgerv1.Operation
		if v.OperationID != "" {
			op = &opledgerv1.Operation{Id: v.OperationID}
		}
		var edit *client.Edit
		if v.Edit != nil {
			edit = client.NewEdit(v.Edit.Supersedes, v.Edit.OriginalArgs, v.Edit.Args)
		}
		var o client.Outcome
		switch v.Status {
		case "succeeded":
			o = &client.Succeeded{Operation: op, Result: v.Result, Edit: edit}
		case "failed":
			o = &client.Failed{Operation: op, Reason: client.Reason(v.Reason), Message: v.Message, Edit: edit}
		case "outcome_unknown":
			o = &client.OutcomeUnknown{Operation: op, Edit: edit}
		case "awaiting_approval":
			o = &client.AwaitingApproval{Operation: op, Edit: edit}
		default:
			t.Fatalf("%s: unknown status %q", v.Name, v.Status)
		}
		require.Equal(t, v.ForModel, o.ForModel(), v.Name)
		require.Equal(t, v.OperationID, o.OperationID(), v.Name)
	}
	require.NotEmpty(t, file.RefusalMessages)
	for _, v := range file.RefusalMessages {
		require.Equal(t, v.ForModel, client.RefusalMessage(client.Reason(v.Reason), v.Message), v.Reason)
	}
	require.NotEmpty(t, file.OperationDuplicate)
	for _, v := range file.OperationDuplicate {
		require.Equal(t, v.Message, fmt.Sprintf(client.MessageOperationDuplicate, client.StateWords(opledgerv1.State(opledgerv1.State_value[v.State]))), v.State)
	}
	require.NotEmpty(t, file.ModelDescriptions)
	for _, v := range file.ModelDescriptions {
		require.Equal(t, v.Want, client.ModelDescription(v.Description, v.Summary), v.Description)
	}
}

// stubLedger answers Prepare with an operation in prepareState and Execute
// with executeOp or executeErr, and counts the calls.
type stubLedger struct {
	opledgerv1.UnimplementedLedgerServiceServer

	prepareState opledgerv1.State
	prepareErr   error
	// getState is what Get answers when set (else prepareState).
	getState   opledgerv1.State
	executeOp  *opledgerv1.Operation
	executeErr error

	mu                sync.Mutex
	gets, executes    int
	executeWaitMillis int64
	prepares          []*opledgerv1.PrepareRequest
	reconciles        []*opledgerv1.ReconcileRequest
}

func (s *stubLedger) Prepare(_ context.Context, r *opledgerv1.PrepareRequest) (*opledgerv1.PrepareResponse, error) {
	s.mu.Lock()
	s.prepares = append(s.prepares, r)
	s.mu.Unlock()
	if s.prepareErr != nil {
		return nil, s.prepareErr
	}
	return &opledgerv1.PrepareResponse{Operation: &opledgerv1.Operation{Id: "op_1", Tool: r.GetTool(), State: s.prepareState}}, nil
}

func (s *stubLedger) Reconcile(_ context.Context, r *opledgerv1.ReconcileRequest) (*opledgerv1.ReconcileResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconciles = append(s.reconciles, r)
	return &opledgerv1.ReconcileResponse{Operation: &opledgerv1.Operation{Id: r.GetOperationId()}}, nil
}

func (s *stubLedger) Get(_ context.Context, r *opledgerv1.GetRequest) (*opledgerv1.GetResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	state := s.prepareState
	if s.getState != opledgerv1.State_STATE_UNSPECIFIED {
		state = s.getState
	}
	return &opledgerv1.GetResponse{Operation: &opledgerv1.Operation{Id: r.GetOperationId(), State: state}}, nil
}

func (s *stubLedger) Execute(_ context.Context, r *opledgerv1.ExecuteRequest) (*opledgerv1.ExecuteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executes++
	s.executeWaitMillis = r.GetWait().AsDuration().Milliseconds()
	if s.executeErr != nil {
		return nil, s.executeErr
	}
	return &opledgerv1.ExecuteResponse{Operation: s.executeOp}, nil
}

func (s *stubLedger) counts() (gets, executes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets, s.executes
}

func startStub(t *testing.T, s *stubLedger) *client.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	opledgerv1.RegisterLedgerServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c, err := client.New(lis.Addr().String(), "opl_test", client.WithPlaintext(), client.WithRetryPolicy(fast))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// storedError is what the server stores in Operation.error.
func storedError(t *testing.T, reason client.Reason, msg string) *spb.Status {
	t.Helper()
	info, err := anypb.New(&errdetails.ErrorInfo{Domain: client.Domain, Reason: string(reason)})
	require.NoError(t, err)
	return &spb.Status{Code: int32(codes.FailedPrecondition), Message: msg, Details: []*anypb.Any{info}}
}

func TestToolRunnerMapsEveryFinalState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run := func(s *stubLedger) client.Outcome {
		t.Helper()
		out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{ExecuteWait: 3 * time.Second}).Run(ctx, "pay_invoice", nil, "k")
		require.NoError(t, err)
		return out
	}

	failed := &stubLedger{prepareState: opledgerv1.State_STATE_READY, executeOp: &opledgerv1.Operation{
		Id: "op_1", State: opledgerv1.State_STATE_FAILED, Error: storedError(t, client.ReasonDownstreamRejected, "card declined")}}
	f, ok := run(failed).(*client.Failed)
	require.True(t, ok)
	require.Equal(t, client.ReasonDownstreamRejected, f.Reason)
	require.Equal(t, "card declined", f.Message)
	require.Equal(t, "op_1", f.OperationID())
	failed.mu.Lock()
	require.Equal(t, int64(3000), failed.executeWaitMillis, "Execute waits ExecuteWait")
	// The one-call path is asked for; this stub ignores it (as a server
	// without it would), so the runner executes the READY operation itself.
	require.Len(t, failed.prepares, 1)
	require.True(t, failed.prepares[0].GetExecute())
	require.Equal(t, int64(3000), failed.prepares[0].GetWait().AsDuration().Milliseconds())
	failed.mu.Unlock()

	unknown := run(&stubLedger{prepareState: opledgerv1.State_STATE_READY, executeOp: &opledgerv1.Operation{
		Id: "op_1", State: opledgerv1.State_STATE_OUTCOME_UNKNOWN, Error: storedError(t, client.ReasonDownstreamOutcomeUnknown, "HTTP 500")}})
	u, ok := unknown.(*client.OutcomeUnknown)
	require.True(t, ok, "an unknown outcome is its own type, got %T", unknown)
	require.False(t, u.Pending)
	_, isFailed := unknown.(*client.Failed)
	require.False(t, isFailed)

	pending := run(&stubLedger{prepareState: opledgerv1.State_STATE_EXECUTING, executeOp: &opledgerv1.Operation{
		Id: "op_1", State: opledgerv1.State_STATE_EXECUTING}})
	p, ok := pending.(*client.OutcomeUnknown)
	require.True(t, ok, "got %T", pending)
	require.True(t, p.Pending)

	// The one-call path answered with the outcome: no Execute.
	oneCall := &stubLedger{prepareState: opledgerv1.State_STATE_SUCCEEDED}
	done := run(oneCall)
	_, executes := oneCall.counts()
	require.Equal(t, 0, executes)
	s, ok := done.(*client.Succeeded)
	require.True(t, ok, "got %T", done)
	require.Equal(t, map[string]any{}, s.Result)
	require.Equal(t, `{"operation_id":"op_1","result":{},"status":"succeeded"}`, done.ForModel())
}

// TestToolRunnerExpiredApprovalIsAwaitingApproval: an approval that lapsed
// before the call ran puts the operation back to AWAITING_APPROVAL (the
// ledger asks its approvers again), so the same call, under the same key,
// waits for a new decision. Answering it as a failure would have the agent
// make the call again under a new key: a second operation for one intention.
func TestToolRunnerExpiredApprovalIsAwaitingApproval(t *testing.T) {
	t.Parallel()
	expired := func(withID bool) error {
		info := &errdetails.ErrorInfo{Domain: client.Domain, Reason: string(client.ReasonApprovalExpired)}
		if withID {
			info.Metadata = map[string]string{"operation_id": "op_1"}
		}
		st, err := status.New(codes.FailedPrecondition, "the approval expired; it must be approved again").WithDetails(info)
		require.NoError(t, err)
		return st.Err()
	}
	for name, s := range map[string]*stubLedger{
		"the one-call path's Prepare": {prepareErr: expired(true), getState: opledgerv1.State_STATE_AWAITING_APPROVAL},
		"Execute":                     {prepareState: opledgerv1.State_STATE_READY, executeErr: expired(false), getState: opledgerv1.State_STATE_AWAITING_APPROVAL},
	} {
		out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{}).Run(context.Background(), "pay_invoice", nil, "k")
		require.NoError(t, err, name)
		a, ok := out.(*client.AwaitingApproval)
		require.True(t, ok, "%s: got %T", name, out)
		require.Equal(t, "op_1", a.OperationID(), name)
		require.Equal(t, opledgerv1.State_STATE_AWAITING_APPROVAL, a.Operation.GetState(), name)
		require.Contains(t, a.ForModel(), `"status":"awaiting_approval"`, name)
	}
}

func TestToolRunnerAwaitingApprovalWithoutWaitCallsNothingElse(t *testing.T) {
	t.Parallel()
	s := &stubLedger{prepareState: opledgerv1.State_STATE_AWAITING_APPROVAL}
	out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{}).Run(context.Background(), "pay_invoice", nil, "k")
	require.NoError(t, err)
	_, ok := out.(*client.AwaitingApproval)
	require.True(t, ok, "got %T", out)
	gets, executes := s.counts()
	require.Equal(t, 0, gets)
	require.Equal(t, 0, executes)
}

func TestToolRunnerApprovalWaitEndsAwaiting(t *testing.T) {
	t.Parallel()
	s := &stubLedger{prepareState: opledgerv1.State_STATE_AWAITING_APPROVAL}
	hooked := 0
	start := time.Now()
	out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{
		ApprovalWait:       700 * time.Millisecond,
		OnApprovalRequired: func(context.Context, *opledgerv1.Operation) error { hooked++; return nil },
	}).Run(context.Background(), "pay_invoice", nil, "k")
	require.NoError(t, err)
	_, ok := out.(*client.AwaitingApproval)
	require.True(t, ok, "got %T", out)
	require.Equal(t, 1, hooked)
	require.True(t, time.Since(start) >= 700*time.Millisecond, "it waited for the decision")
	gets, executes := s.counts()
	require.True(t, gets >= 2, "it polled Get (%d)", gets)
	require.Equal(t, 0, executes)
}

func TestToolRunnerReportsInfrastructureErrorsAsErrors(t *testing.T) {
	t.Parallel()
	s := &stubLedger{prepareState: opledgerv1.State_STATE_READY, executeErr: status.Error(codes.Unavailable, "down")}
	out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{}).Run(context.Background(), "pay_invoice", nil, "k")
	require.Error(t, err)
	require.Equal(t, nil, out)
	require.Equal(t, codes.Unavailable, status.Code(err))
	_, executes := s.counts()
	require.Equal(t, 4, executes, "the client's retry budget, not more")
}

// TestToolRunnerEmptyArgumentTextIsNoArguments: a model that calls a tool
// without arguments may write empty (or blank) argument text; the runner
// sends it as {} (as the Python, TypeScript and Java runners do), where
// Prepare itself still rejects text that is not a JSON object.
func TestToolRunnerEmptyArgumentTextIsNoArguments(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"", "  \n\t"} {
		s := &stubLedger{prepareState: opledgerv1.State_STATE_SUCCEEDED}
		out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{}).Run(context.Background(), "list_invoices", json.RawMessage(text), "k")
		require.NoError(t, err, "%q", text)
		_, ok := out.(*client.Succeeded)
		require.True(t, ok, "%q: got %T", text, out)
		s.mu.Lock()
		require.Len(t, s.prepares, 1)
		require.Empty(t, s.prepares[0].GetArgs().GetFields(), "%q", text)
		require.NotNil(t, s.prepares[0].GetArgs(), "%q: args are sent as {}", text)
		s.mu.Unlock()
	}
	// Text that is not a JSON object is still the caller's error.
	_, err := client.NewToolRunner(startStub(t, &stubLedger{}), client.RunnerOptions{}).Run(context.Background(), "list_invoices", json.RawMessage("[]"), "k")
	require.Error(t, err)
	require.Contains(t, err.Error(), "args must be a JSON object")
}

// TestToolRunnerRefusalUnderAUsedKeyNamesTheEarlierCall: a call refused
// because its key already names an earlier call (the model reworded the
// arguments of a round that is being retried; a tools file whose version
// moved on) is not "nothing happened, use a new key": the earlier call may
// have taken effect. The runner answers a *Failed that carries the earlier
// operation and says so; a new key would make it twice.
func TestToolRunnerRefusalUnderAUsedKeyNamesTheEarlierCall(t *testing.T) {
	t.Parallel()
	refusal := func(reason client.Reason, code codes.Code) error {
		info := &errdetails.ErrorInfo{Domain: client.Domain, Reason: string(reason), Metadata: map[string]string{"operation_id": "op_1"}}
		st, err := status.New(code, "this idempotency key was already used for a different request; use a new key for a new operation").WithDetails(info)
		require.NoError(t, err)
		return st.Err()
	}
	for _, c := range []struct {
		reason client.Reason
		code   codes.Code
	}{{client.ReasonIdempotencyKeyReused, codes.AlreadyExists}, {client.ReasonToolVersionUnknown, codes.InvalidArgument}, {client.ReasonArgsInvalid, codes.InvalidArgument}} {
		s := &stubLedger{prepareErr: refusal(c.reason, c.code), getState: opledgerv1.State_STATE_OUTCOME_UNKNOWN}
		out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{}).Run(context.Background(), "send_email", nil, "k")
		require.NoError(t, err, string(c.reason))
		f, ok := out.(*client.Failed)
		require.True(t, ok, "%s: got %T", c.reason, out)
		require.Equal(t, c.reason, f.Reason)
		require.Equal(t, "op_1", f.OperationID(), "the earlier call is named")
		require.Equal(t, fmt.Sprintf(client.MessageKeyNamesEarlierCall, "outcome unknown"), f.Message)
		require.False(t, strings.Contains(f.ForModel(), "use a new key"), f.ForModel())
		require.Contains(t, f.ForModel(), `"operation_id":"op_1"`)
	}
}

// TestResolutionFenceIsSent: WithResolutionFence puts the attempt the
// operator read into the resolution the server checks it against.
func TestResolutionFenceIsSent(t *testing.T) {
	t.Parallel()
	s := &stubLedger{}
	c := startStub(t, s)
	_, err := c.Reconcile(context.Background(), "op_1", client.WithResolution(opledgerv1.State_STATE_FAILED, "", "checked"), client.WithResolutionFence(3))
	require.NoError(t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Len(t, s.reconciles, 1)
	require.Equal(t, int64(3), s.reconciles[0].GetResolution().GetFence())
	require.Equal(t, "checked", s.reconciles[0].GetResolution().GetNote())
}

// TestCheckOperationAnswersEveryState: check_operation answers a rejected
// or cancelled operation as a refusal (never an error), and an executing
// one whose Execute is refused for another reason as pending, never as
// "failed" (it may have taken effect).
func TestCheckOperationAnswersEveryState(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		state  opledgerv1.State
		reason client.Reason
	}{{opledgerv1.State_STATE_REJECTED, client.ReasonOperationRejected}, {opledgerv1.State_STATE_CANCELLED, client.ReasonOperationCancelled}} {
		s := &stubLedger{getState: c.state, executeErr: errWithReason(t, codes.FailedPrecondition, c.reason)}
		out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{}).Run(context.Background(), client.CheckOperationTool,
			json.RawMessage(`{"operation_id":"op_1"}`), "")
		require.NoError(t, err, c.state.String())
		f, ok := out.(*client.Failed)
		require.True(t, ok, out.ForModel())
		require.Equal(t, c.reason, f.Reason)
	}
	s := &stubLedger{getState: opledgerv1.State_STATE_EXECUTING}
	s.executeErr = errWithReason(t, codes.FailedPrecondition, client.ReasonToolVersionUnknown)
	out, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{}).Check(context.Background(), "op_1")
	require.NoError(t, err)
	u, ok := out.(*client.OutcomeUnknown)
	require.True(t, ok, out.ForModel())
	require.True(t, u.Pending)
}

// errWithReason is a status error with an ErrorInfo of reason.
func errWithReason(t *testing.T, code codes.Code, reason client.Reason) error {
	t.Helper()
	st, err := status.New(code, "refused").WithDetails(&errdetails.ErrorInfo{Domain: client.Domain, Reason: string(reason)})
	require.NoError(t, err)
	return st.Err()
}

// TestRunExecuteRefusedOnAnApprovedCallIsPending: a person approved
// the call while Run waited, and the Execute that follows lands on a replica
// that refuses it (TOOL_VERSION_UNKNOWN: a rolling deploy that dropped the
// version). The operation is still READY and approved: the same Run again,
// or check_operation, executes it on a replica that has the version. "failed"
// tells the model nothing happened and it may make the call again under a
// new key: a second operation, and two effects once both run. Check already
// answers exactly this server answer as pending; Run must not say failed.
func TestRunExecuteRefusedOnAnApprovedCallIsPending(t *testing.T) {
	t.Parallel()
	s := &stubLedger{prepareState: opledgerv1.State_STATE_AWAITING_APPROVAL, getState: opledgerv1.State_STATE_READY,
		executeErr: errWithReason(t, codes.InvalidArgument, client.ReasonToolVersionUnknown)}
	r := client.NewToolRunner(startStub(t, s), client.RunnerOptions{ApprovalWait: 5 * time.Second})

	checked, err := r.Check(context.Background(), "op_1")
	require.NoError(t, err)
	_, ok := checked.(*client.OutcomeUnknown)
	require.True(t, ok, "check: %s", checked.ForModel())

	out, err := r.Run(context.Background(), "pay_invoice", json.RawMessage(`{"invoice_id":"INV-1","amount_minor":4900,"currency":"EUR"}`), "k")
	require.NoError(t, err)
	_, executes := s.counts()
	require.Equal(t, 2, executes)
	u, ok := out.(*client.OutcomeUnknown)
	require.True(t, ok, "run: %s", out.ForModel())
	require.True(t, u.Pending)
}

// TestRunArgsTextThatCannotTravelIsRefused: model argument text that cannot
// travel as written (a member given twice, an unpaired surrogate escape) is
// refused before anything is sent, as every client refuses it.
func TestRunArgsTextThatCannotTravelIsRefused(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		`{"invoice_id":"INV-1","amount_minor":100,"amount_minor":100000,"currency":"EUR"}`,
		`{"to":"a@example.com","subject":"\ud83d","body":"x"}`,
	} {
		s := &stubLedger{prepareState: opledgerv1.State_STATE_SUCCEEDED}
		_, err := client.NewToolRunner(startStub(t, s), client.RunnerOptions{}).Run(context.Background(), "pay_invoice", json.RawMessage(text), "k")
		require.Error(t, err, text)
		s.mu.Lock()
		require.Len(t, s.prepares, 0, text)
		s.mu.Unlock()
	}
}
