package mcpgateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	client "github.com/opledger/opledger/clients/go"
	"github.com/opledger/opledger/internal/mcpgateway"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
)

// sendEmailV2 is the demo's send_email, declared again as version 2 (the
// current one once appended): the same schema and downstream.
func sendEmailV2(y []byte) []byte {
	s := string(y)
	i := strings.Index(s, "  - name: send_email")
	block := s[i:]
	if j := strings.Index(block[1:], "\n  - name:"); j >= 0 {
		block = block[:j+2]
	}
	return []byte(s + "\n" + strings.Replace(block, `version: "1"`, `version: "2"`, 1))
}

// requireNamesEarlierCall: the runner's answer to a call refused under a
// key that names an earlier call carries that call and says it may have
// taken effect, never "nothing happened, use a new key".
func requireNamesEarlierCall(t *testing.T, out client.Outcome, earlier string, state string) {
	t.Helper()
	f, ok := out.(*client.Failed)
	require.True(t, ok, "got %T: %s", out, out.ForModel())
	require.Equal(t, earlier, f.OperationID(), out.ForModel())
	require.Equal(t, fmt.Sprintf(client.MessageKeyNamesEarlierCall, state), f.Message)
	require.NotContains(t, out.ForModel(), "use a new key")
}

func sentEmailArgs() map[string]any {
	return map[string]any{"to": "bob@example.com", "subject": "Receipt", "body": "Thanks."}
}

// unknownEmail runs send_email under key with opts while the processor
// answers 500 after sending it: the runner answers OutcomeUnknown, and the
// e-mail went out.
func unknownEmail(t *testing.T, w *world, args map[string]any, key string, opts client.RunnerOptions) client.Outcome {
	t.Helper()
	w.env.Fakepay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}})
	out, err := agentRunner(t, w, opts).Run(t.Context(), "send_email", args, key)
	require.NoError(t, err)
	_, unknown := out.(*client.OutcomeUnknown)
	require.True(t, unknown, out.ForModel())
	return out
}

// agentRunner is a ToolRunner of the Go client for w's agent, closed when
// the test ends.
func agentRunner(t *testing.T, w *world, opts client.RunnerOptions) *client.ToolRunner {
	t.Helper()
	c, err := client.New(w.srv.Addr, w.agent, client.WithPlaintext())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return client.NewToolRunner(c, opts)
}

// TestRunnerResumeAfterVersionBump: an agent's call ends OUTCOME_UNKNOWN
// (the e-mail was sent); the tools file then gains send_email v2 (a
// deploy); the agent resumes the call as the runner's docs say: the same
// Run, same args, same key. Its fingerprint names v2 now, so the key is
// refused as reused; the answer names the earlier call, outcome unknown,
// where it was "failed: nothing happened, use a new key".
func TestRunnerResumeAfterVersionBump(t *testing.T) {
	w, ctx, args, key := newWorld(t, demoTools()), t.Context(), sentEmailArgs(), "conv-1-round-3-send_email"
	out := unknownEmail(t, w, args, key, client.RunnerOptions{})
	require.Len(t, w.env.Fakepay.Emails(), 1, "the e-mail was sent")

	// The deploy: send_email v2 becomes current.
	w.env.ToolsYAML = sendEmailV2(w.env.ToolsYAML)
	srv2 := w.env.StartServer(harness.ServerOptions{})
	c2, err := client.New(srv2.Addr, w.agent, client.WithPlaintext())
	require.NoError(t, err)
	defer c2.Close()
	again, err := client.NewToolRunner(c2, client.RunnerOptions{}).Run(ctx, "send_email", args, key)
	require.NoError(t, err)
	requireNamesEarlierCall(t, again, out.OperationID(), "outcome unknown")
	require.Len(t, w.env.Fakepay.Emails(), 1)
}

// TestRunnerPinnedVersionRemoved: the same with a runner pinned to version
// 1 (RunnerOptions.ToolVersion) and a deploy that replaces v1 by v2: the
// refusal (TOOL_VERSION_UNKNOWN) names the earlier call.
func TestRunnerPinnedVersionRemoved(t *testing.T) {
	w, ctx, args, key := newWorld(t, demoTools()), t.Context(), sentEmailArgs(), "conv-2-round-3-send_email"
	out := unknownEmail(t, w, args, key, client.RunnerOptions{ToolVersion: "1"})

	w.env.ToolsYAML = []byte(strings.Replace(string(w.env.ToolsYAML), "  - name: send_email\n    version: \"1\"", "  - name: send_email\n    version: \"2\"", 1))
	srv2 := w.env.StartServer(harness.ServerOptions{})
	c2, err := client.New(srv2.Addr, w.agent, client.WithPlaintext())
	require.NoError(t, err)
	defer c2.Close()
	again, err := client.NewToolRunner(c2, client.RunnerOptions{ToolVersion: "1"}).Run(ctx, "send_email", args, key)
	require.NoError(t, err)
	requireNamesEarlierCall(t, again, out.OperationID(), "outcome unknown")
}

// TestGatewayHostKeyAfterVersionBump: the gateway with the host's key (the
// recommended way), restarted after a deploy that made send_email v2
// current, gets the same call (same arguments, same host key) refused as a
// reused key: it answers with the earlier call as it stands (outcome
// unknown: do not retry), not "error: nothing changed, use a new key",
// which models retry with other arguments.
func TestGatewayHostKeyAfterVersionBump(t *testing.T) {
	w := newWorld(t, demoTools())
	w.env.Fakepay.SetFaults(fakepay.Faults{FailAfterCommit: fakepay.Trigger{Next: 1}})
	cs := connectHTTP(t, w.httpGateway(""), nil)
	args := map[string]any{"to": "bob@example.com", "subject": "Receipt", "body": "Thanks."}
	meta := mcp.Meta{"opledger/idempotency_key": "host-call-77"}
	_, a := call(t, cs, "send_email", args, meta)
	require.Equal(t, mcpgateway.StatusOutcomeUnknown, a.Status)

	w.env.ToolsYAML = sendEmailV2(w.env.ToolsYAML)
	w.srv = w.env.StartServer(harness.ServerOptions{})
	cs2 := connectHTTP(t, w.httpGateway(""), nil) // the gateway restarted after the deploy
	res, b := call(t, cs2, "send_email", args, meta)
	require.Equal(t, mcpgateway.StatusOutcomeUnknown, b.Status, text(res))
	require.False(t, res.IsError)
	require.Equal(t, a.OperationID, b.OperationID)
	require.Contains(t, text(res), "was not made")
	require.NotContains(t, text(res), "use a new key")
}

// TestRunnerRegeneratedRoundKeyReused: the documented key scheme
// (conversation, round, tool; no provider call id, so that a regenerated
// answer "names the same intended call"). Round 3's e-mail goes out but the
// runtime loses the answer; the round is retried and the regenerated answer
// words the body differently. The runner names the e-mail that was sent,
// where it told the model "failed", with no operation id.
func TestRunnerRegeneratedRoundKeyReused(t *testing.T) {
	w := newWorld(t, demoTools())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runner := agentRunner(t, w, client.RunnerOptions{})
	key, err := client.DeriveKey(client.KeyParts{Conversation: harness.Unique("conv"), Round: 3, Tool: "send_email"})
	require.NoError(t, err)
	first, err := runner.Run(ctx, "send_email", map[string]any{"to": "bob@example.com", "subject": "Receipt", "body": "Thanks."}, key)
	require.NoError(t, err)
	_, ok := first.(*client.Succeeded)
	require.True(t, ok) // (the runtime lost this answer)
	again, err := runner.Run(ctx, "send_email", map[string]any{"to": "bob@example.com", "subject": "Receipt", "body": "Thank you!"}, key)
	require.NoError(t, err)
	requireNamesEarlierCall(t, again, first.OperationID(), "succeeded")
	require.Len(t, w.env.Fakepay.Emails(), 1)
}

// TestRunnerRegeneratedRoundInAnotherOrder: the documented key scheme
// (conversation, round and tool; no call id unless the answer is pinned)
// never sends a call twice when a round that ran in part is regenerated
// with its calls in another order. A round [e-mail bob, e-mail carol]
// crashed after bob's; its regeneration [carol, bob] has carol refused as
// a reuse of the key (naming bob's call, which succeeded) and bob's replayed.
// Numbering a tool's calls by position (a second key for the second call)
// would have e-mailed bob twice here, which is why the clients do not.
func TestRunnerRegeneratedRoundInAnotherOrder(t *testing.T) {
	w := newWorld(t, demoTools())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runner := agentRunner(t, w, client.RunnerOptions{})
	bob := map[string]any{"to": "bob@example.com", "subject": "Receipt", "body": "Thanks."}
	carol := map[string]any{"to": "carol@example.com", "subject": "Receipt", "body": "Thanks."}
	key, err := client.DeriveKey(client.KeyParts{Conversation: harness.Unique("conv"), Round: 3, Tool: "send_email"})
	require.NoError(t, err)
	first, err := runner.Run(ctx, "send_email", bob, key) // then the runtime crashed
	require.NoError(t, err)
	_, ok := first.(*client.Succeeded)
	require.True(t, ok)
	again, err := runner.Run(ctx, "send_email", carol, key)
	require.NoError(t, err)
	requireNamesEarlierCall(t, again, first.OperationID(), "succeeded")
	replay, err := runner.Run(ctx, "send_email", bob, key)
	require.NoError(t, err)
	require.Equal(t, first.OperationID(), replay.OperationID())
	require.Len(t, w.env.Fakepay.Emails(), 1, "bob once; carol's call was not made, and the model was told so")
}

// TestRunnerCheckOperation: the runner's check_operation tool, which the
// model is pointed to after awaiting_approval and outcome_unknown (a new
// call of the tool in a later round would have another key, and be a
// second request). It runs an operation approved since, once; reports an
// unknown outcome as it stands after a lookup; and refuses an id it does
// not know, never preparing anything.
func TestRunnerCheckOperation(t *testing.T) {
	w := newWorld(t, demoTools())
	ctx := t.Context()
	runner := agentRunner(t, w, client.RunnerOptions{})
	tools, err := runner.ModelTools(ctx)
	require.NoError(t, err)
	require.Equal(t, client.CheckOperationTool, tools[len(tools)-1].Name)

	key, err := client.DeriveKey(client.KeyParts{Conversation: harness.Unique("conv"), Round: 1, Tool: "pay_invoice"})
	require.NoError(t, err)
	first, err := runner.Run(ctx, "pay_invoice", map[string]any{"invoice_id": "INV-CHK", "amount_minor": 700, "currency": "EUR"}, key)
	require.NoError(t, err)
	waiting, ok := first.(*client.AwaitingApproval)
	require.True(t, ok, first.ForModel())
	require.Contains(t, first.ForModel(), "check_operation")
	w.approve(waiting.OperationID(), waiting.Operation.GetFingerprint())
	for range 2 {
		done, err := runner.Run(ctx, client.CheckOperationTool, json.RawMessage(`{"operation_id":"`+waiting.OperationID()+`"}`), "")
		require.NoError(t, err)
		_, ok = done.(*client.Succeeded)
		require.True(t, ok, done.ForModel())
		require.Equal(t, waiting.OperationID(), done.OperationID())
	}
	require.Len(t, w.env.Fakepay.Charges(), 1, "run once, by the first check")

	unknown := unknownEmail(t, w, sentEmailArgs(), "conv-chk-round-2-send_email", client.RunnerOptions{})
	again, err := runner.Check(ctx, unknown.OperationID())
	require.NoError(t, err)
	_, ok = again.(*client.OutcomeUnknown)
	require.True(t, ok, "send_email has no lookup: still unknown: %s", again.ForModel())
	require.Len(t, w.env.Fakepay.Emails(), 1)

	missing, err := runner.Run(ctx, client.CheckOperationTool, map[string]any{"operation_id": "op_00000000000000000000000000"}, "")
	require.NoError(t, err)
	f, ok := missing.(*client.Failed)
	require.True(t, ok, missing.ForModel())
	require.Equal(t, client.MessageCheckUnknownOperation, f.Message)
}
