package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoExecutor is a custom executor as a Go user would write one.
type echoExecutor struct{ prefix string }

func (e echoExecutor) Send(_ context.Context, c Call) Result {
	return Result{Outcome: OutcomeSucceeded, ExternalRef: e.prefix + c.OperationID, Attempts: 1}
}

type lookingExecutor struct{ echoExecutor }

func (lookingExecutor) Lookup(context.Context, Call) LookupResult {
	return LookupResult{Status: LookupInconclusive}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	reg := NewDefaultRegistry(nil, nil)
	require.Equal(t, []string{TypeHTTP}, reg.Types())

	e, err := reg.New(TypeHTTP, Settings{Tool: "pay_invoice", URL: "http://127.0.0.1:7070/charges",
		LookupURL: "http://127.0.0.1:7070/charges?idempotency_key={key}", DedupesKeys: true,
		LookupConsistent: true, Timeout: time.Second, ExternalRefField: "id", MaxAttempts: 4})
	require.NoError(t, err)
	h, ok := e.(*HTTP)
	require.True(t, ok)
	require.Equal(t, 4, h.cfg.MaxAttempts)
	require.Equal(t, Capabilities{DedupesKeys: true, HasLookup: true, LookupConsistent: true}, CapabilitiesOf(e))

	_, err = reg.New(TypeHTTP, Settings{Tool: "broken"})
	require.ErrorContains(t, err, `tool "broken"`)
	_, err = reg.New("grpc", Settings{})
	require.ErrorContains(t, err, `unknown type "grpc"`)

	require.NoError(t, reg.Register("echo", func(s Settings) (Executor, error) {
		prefix, _ := s.Extra["prefix"].(string)
		return echoExecutor{prefix: prefix}, nil
	}))
	require.Error(t, reg.Register("echo", func(Settings) (Executor, error) { return nil, nil }))
	require.Error(t, reg.Register("", func(Settings) (Executor, error) { return nil, nil }))
	require.Error(t, reg.Register("nil", nil))
	require.Equal(t, []string{"echo", TypeHTTP}, reg.Types())

	e, err = reg.New("echo", Settings{Tool: "t", Extra: map[string]any{"prefix": "ref-"}})
	require.NoError(t, err)
	require.Equal(t, "ref-op", e.Send(t.Context(), Call{OperationID: "op"}).ExternalRef)
	require.Equal(t, Capabilities{}, CapabilitiesOf(e), "unknown capabilities are the safe ones")

	require.NoError(t, reg.Register("failing", func(Settings) (Executor, error) { return nil, errors.New("boom") }))
	_, err = reg.New("failing", Settings{Tool: "t"})
	require.ErrorContains(t, err, "boom")
	require.NoError(t, reg.Register("nil-result", func(Settings) (Executor, error) { return nil, nil }))
	_, err = reg.New("nil-result", Settings{})
	require.Error(t, err)

	// Registries are values: another one is unaffected.
	require.Equal(t, []string{}, NewRegistry().Types())
	require.Equal(t, Capabilities{HasLookup: true}, CapabilitiesOf(lookingExecutor{}))
}
