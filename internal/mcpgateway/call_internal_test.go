package mcpgateway

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	client "github.com/opledger/opledger/clients/go"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestUnpairedSurrogate holds the scanner to protojson: it names an escape
// exactly when protojson refuses the text for one, and only inside strings.
func TestUnpairedSurrogate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw string
		esc string
		at  int
	}{
		{raw: `{"a":"\ud83d\ude00"}`},
		{raw: `{"a":"\\ud800"}`},
		{raw: `{"a":"\u0041\u00e9\uffff"}`},
		{raw: `{"\\":"\"\ud800"}`, esc: `\ud800`, at: 9},
		{raw: `{"a":"\ud800"}`, esc: `\ud800`, at: 6},
		{raw: `{"a":"\uDBFF\uDBFF\uDC00"}`, esc: `\uDBFF`, at: 6},
		{raw: `{"a":"x\udc00"}`, esc: `\udc00`, at: 7},
		{raw: `{"\ud800":1}`, esc: `\ud800`, at: 2},
		{raw: `{"a":"\ud800\u0041"}`, esc: `\ud800`, at: 6},
	} {
		esc, at, ok := unpairedSurrogate([]byte(tc.raw))
		require.Equal(t, tc.esc != "", ok, tc.raw)
		require.Equal(t, tc.esc, esc, tc.raw)
		require.Equal(t, tc.at, at, tc.raw)
		err := protojson.Unmarshal([]byte(tc.raw), &structpb.Struct{})
		require.Equal(t, ok, err != nil, "%s: protojson says %v", tc.raw, err)
	}
}

// TestHintSaysWhatHappened: a refusal that names an operation never says
// nothing was recorded (the operation exists), and a tool version the
// ledger no longer serves is not blamed on the arguments.
func TestHintSaysWhatHappened(t *testing.T) {
	t.Parallel()
	op := &opledgerv1.Operation{Id: "op_1"}
	for _, r := range []client.Reason{client.ReasonRateLimited, client.ReasonQuotaExceeded, client.ReasonRoleRequired, client.ReasonToolVersionUnknown} {
		require.Contains(t, hint(r, nil, false), "Nothing was recorded", r)
		require.NotContains(t, hint(r, op, false), "Nothing was recorded", r)
		require.Contains(t, hint(r, op, false), "op_1", r)
	}
	require.NotContains(t, hint(client.ReasonToolVersionUnknown, nil, false), "Fix the arguments")
	require.Contains(t, hint(client.ReasonToolVersionUnknown, nil, false), "restarted")
	// Under the host's key the model's next call has another key: a refusal
	// that may have recorded the call (the ledger unreachable, a reason this
	// gateway does not know) never says calling again is safe.
	for _, r := range []client.Reason{client.ReasonLedgerUnavailable, client.Reason("SOMETHING_NEWER")} {
		require.Contains(t, hint(r, nil, false), "Calling again with the same arguments is safe", r)
		require.NotContains(t, hint(r, nil, true), "safe", r)
		require.Contains(t, hint(r, nil, true), "Do not call this tool again", r)
	}
}

// TestExecuteRefusalOfARunningOperation: a refusal of check_operation's
// Execute (a replica without the tool version, say) of an operation that
// may have reached the downstream (EXECUTING, OUTCOME_UNKNOWN) is answered
// with its state, never as an "error", which the model reads as "nothing
// was sent" and retries with other arguments.
func TestExecuteRefusalOfARunningOperation(t *testing.T) {
	t.Parallel()
	g := &Gateway{log: slog.New(slog.DiscardHandler)}
	st, err := status.New(codes.InvalidArgument, "tool send_email has no version 1").WithDetails(
		&errdetails.ErrorInfo{Domain: client.Domain, Reason: string(client.ReasonToolVersionUnknown)})
	require.NoError(t, err)
	for state, want := range map[opledgerv1.State]string{
		opledgerv1.State_STATE_EXECUTING:       StatusExecuting,
		opledgerv1.State_STATE_OUTCOME_UNKNOWN: StatusOutcomeUnknown,
	} {
		res, _ := g.executeError(&opledgerv1.Operation{Id: "op_1", Tool: "send_email", State: state}, st.Err())
		require.False(t, res.IsError, state.String())
		a, ok := res.StructuredContent.(Answer)
		require.True(t, ok, "%T", res.StructuredContent)
		require.Equal(t, want, a.Status, state.String())
	}
	res, _ := g.executeError(&opledgerv1.Operation{Id: "op_1", Tool: "send_email", State: opledgerv1.State_STATE_READY}, st.Err())
	require.True(t, res.IsError, "READY: nothing was sent, an error it is")
}
