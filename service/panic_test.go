package service_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// boom is a registered executor with a bug: it panics.
type boom struct{}

func (boom) Send(context.Context, executor.Call) executor.Result { panic("custom executor bug") }

// customTool is a tools file of one tool, named as its executor type, that
// needs no approval and takes any object, and a registry with exec
// registered under that type.
func customTool(t *testing.T, name string, exec executor.Executor) ([]byte, *executor.Registry) {
	t.Helper()
	yaml := fmt.Sprintf(`
tools:
  - name: %s
    version: "1"
    effect: side_effect
    approval:
      required: false
    args_schema: {type: object}
    executor:
      type: %s
`, name, name)
	reg := executor.NewDefaultRegistry(nil, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	require.NoError(t, reg.Register(name, func(executor.Settings) (executor.Executor, error) { return exec, nil }))
	return []byte(yaml), reg
}

// TestPanicLeavesNoAttemptInFlight: a panic in an attempt (here a custom
// executor's) is answered INTERNAL by the recovery interceptor, and the
// attempt no longer counts as in flight, on the Execute path and on the
// one-call path, so a later shutdown does not wait the whole bound for it.
func TestPanicLeavesNoAttemptInFlight(t *testing.T) {
	t.Parallel()
	tools, reg := customTool(t, "boom", boom{})
	env := harness.New(t, harness.Options{ToolsYAML: tools})
	agent := env.Key("acme", "agent")
	svc, client, stop := runService(t, env, reg, 100*time.Millisecond)
	idle := func(path string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		n, err := svc.Ledger.WaitAttempts(wctx)
		require.NoError(t, err, "%s: %d attempt(s) still counted after the handler returned", path, n)
	}

	args, err := structpb.NewStruct(map[string]any{})
	require.NoError(t, err)
	p, err := client.Prepare(harness.Ctx(agent, "k-exec"), &opledgerv1.PrepareRequest{Tool: "boom", Args: args})
	require.NoError(t, err)
	_, err = client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: p.GetOperation().GetId()})
	require.Error(t, err)
	idle("Execute")

	_, err = client.Prepare(harness.Ctx(agent, "k-one-call"), &opledgerv1.PrepareRequest{Tool: "boom", Args: args, Execute: true})
	require.Error(t, err)
	idle("one-call")
	require.NoError(t, stop())
}
