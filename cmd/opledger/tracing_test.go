package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestTracingConsoleExporter runs a real server with
// OTEL_TRACES_EXPORTER=console and checks that an Execute produced the RPC
// span, store spans (the claim with the copy the Prepare left, finding 32
// of docs/performance.md) and the downstream span carrying the operation id and the
// key digest, and that neither the raw key nor an argument leaked into them.
func TestTracingConsoleExporter(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	p := env.StartProcess(harness.ProcessOptions{Env: []string{"OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=100"}})
	agent := env.Key("acme", "agent")
	args := map[string]any{"to": "trace@example.com", "subject": "s", "body": "secret-body-text"}
	st := mustStruct(t, args)
	r, err := p.Client.Prepare(harness.Ctx(agent, "trace-key-123"), &opledgerv1.PrepareRequest{Tool: "send_email", Args: st})
	require.NoError(t, err)
	_, err = p.Client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: r.GetOperation().GetId()})
	require.NoError(t, err)
	id := r.GetOperation().GetId()
	require.Eventually(t, func() bool {
		logs := p.Logs()
		return strings.Contains(logs, `"Name":"downstream.call"`) && strings.Contains(logs, `"Name":"store.OperationClaimKnown"`) &&
			strings.Contains(logs, `"Name":"opledger.v1.LedgerService/Execute"`)
	}, 10*time.Second, 100*time.Millisecond, "spans were exported")
	logs := p.Logs()
	require.Contains(t, logs, id)
	require.Contains(t, logs, "opledger.idempotency_key_digest")
	require.NotContains(t, logs, "trace-key-123")
	require.NotContains(t, logs, "secret-body-text")
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	require.NoError(t, err)
	return s
}
