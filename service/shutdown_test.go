package service_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/service"
)

func TestMain(m *testing.M) { harness.Main(m) }

// emailTools: send_email as the demo declares it (no deduplication, no
// lookup) to the downstream at %s, with a 3 s timeout.
const emailTools = `
tools:
  - name: send_email
    version: "1"
    effect: side_effect
    approval:
      required: false
    args_schema:
      type: object
      properties:
        to: {type: string}
        subject: {type: string}
        body: {type: string}
      required: [to, subject, body]
    executor:
      type: http
      url: %s/emails
      timeout: 3s
      dedupes_keys: false
      external_ref_field: id
      max_attempts: 1
`

// runService runs a service (as serve does, its reconciler off) on env's
// database, with reg's executors (nil: the built-in ones) and drain, on a
// loopback port. stop ends its run's context, as SIGTERM does, and returns
// what Run returned.
func runService(t *testing.T, env *harness.Env, reg *executor.Registry, drain time.Duration) (*service.Service, opledgerv1.LedgerServiceClient, func() error) {
	t.Helper()
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if reg == nil {
		reg = executor.NewDefaultRegistry(nil, logger)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	svc, err := service.New(ctx, service.Config{DatabaseURL: env.DBURL, DownstreamSecret: env.Secret, Drain: drain},
		service.Options{Logger: logger, Tools: env.Tools(), Executors: reg, NoReconciler: true,
			Ledger: func(c *ledger.Config) { c.MinLease = time.Second; c.DownstreamSecret = env.Secret }})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, lis, nil) }()
	return svc, harness.Dial(t, lis.Addr().String()), func() error { cancel(); return <-done }
}

// TestShutdownKeepsTheOutcomeOfAnExecuteInFlight: SIGTERM (the run's
// context ending) while an Execute waits for a downstream that answers after
// the drain. The process stops serving, but it keeps the database pool open
// until the attempt's outcome is written: the e-mail was sent, and the
// ledger says SUCCEEDED, not OUTCOME_UNKNOWN when the lease ends.
func TestShutdownKeepsTheOutcomeOfAnExecuteInFlight(t *testing.T) {
	t.Parallel()
	// A downstream that sends the e-mail, then answers 1.5 s later.
	arrived := make(chan struct{}, 1)
	var sent atomic.Int32
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		arrived <- struct{}{}
		time.Sleep(1500 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"em_1"}`)
	}))
	t.Cleanup(downstream.Close)
	env := harness.New(t, harness.Options{ToolsYAML: []byte(fmt.Sprintf(emailTools, downstream.URL))})
	agent := env.Key("acme", "agent")

	_, client, stop := runService(t, env, nil, 300*time.Millisecond)

	args, err := structpb.NewStruct(map[string]any{"to": "a@example.com", "subject": "s", "body": "b"})
	require.NoError(t, err)
	prep, err := client.Prepare(harness.Ctx(agent, "k1"), &opledgerv1.PrepareRequest{Tool: "send_email", Args: args})
	require.NoError(t, err)
	id := prep.GetOperation().GetId()
	go func() { _, _ = client.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: id}) }()
	<-arrived // the request is at the downstream

	require.NoError(t, stop()) // SIGTERM
	require.EqualValues(t, 1, sent.Load())
	op, err := env.Store.OperationGet(context.Background(), "acme", id)
	require.NoError(t, err)
	require.Equal(t, "SUCCEEDED", op.State, "the downstream answered 200 before the process stopped")
}
