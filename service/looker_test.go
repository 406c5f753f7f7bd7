package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// inFlight is a registered executor whose downstream never answers in
// time, and whose lookup finds the request but not yet its outcome (a
// charge still processing): LookupFound with an outcome that is neither
// success nor refusal.
type inFlight struct{}

func (inFlight) Send(context.Context, executor.Call) executor.Result {
	return executor.Result{Outcome: executor.OutcomeUnknown, Detail: "sent, no answer", Attempts: 1}
}

func (inFlight) Lookup(context.Context, executor.Call) executor.LookupResult {
	return executor.LookupResult{Status: executor.LookupFound, Result: executor.Result{Outcome: executor.OutcomeUnknown, Detail: "processing"}}
}

// TestLookupFoundWithoutAnOutcomeIsInconclusive: a lookup that finds the
// request but reports no outcome of it settles nothing: the operation stays
// OUTCOME_UNKNOWN, where it was recorded SUCCEEDED (with no reference).
func TestLookupFoundWithoutAnOutcomeIsInconclusive(t *testing.T) {
	t.Parallel()
	tools, reg := customTool(t, "in_flight", inFlight{})
	env := harness.New(t, harness.Options{ToolsYAML: tools})
	agent := env.Key("acme", "agent")
	_, client, _ := runService(t, env, reg, time.Second)
	args, err := structpb.NewStruct(map[string]any{})
	require.NoError(t, err)
	p, err := client.Prepare(harness.Ctx(agent, "k-flight"), &opledgerv1.PrepareRequest{Tool: "in_flight", Args: args, Execute: true})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, p.GetOperation().GetState())
	r, err := client.Reconcile(harness.Ctx(agent, ""), &opledgerv1.ReconcileRequest{OperationId: p.GetOperation().GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_OUTCOME_UNKNOWN, r.GetOperation().GetState(), r.GetDetail())
}
