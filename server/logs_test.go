package server_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/interceptors"
	"github.com/opledger/opledger/proof/harness"
)

// logBuffer is an io.Writer that many goroutines may log to at once.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLogsHoldNoKeysOrArgs drives a full life cycle and a few refusals with
// every log level on, then checks that neither idempotency keys, API keys
// nor argument values appear in the logs; the key's digest does.
func TestLogsHoldNoKeysOrArgs(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	env := harness.New(t, harness.Options{})
	c := env.StartServer(harness.ServerOptions{Logger: logger}).Client
	agent, approver := env.Key("acme", "agent"), env.Key("acme", "approver")
	payKey := harness.Unique("secret-pay-key")
	mailKey := harness.Unique("secret-mail-key")
	const body = "Dear accounts payable, the transfer code is 7731-XK."

	pay := prepare(t, c, agent, payKey, "pay_invoice", invoiceArgs(t, 4900)).GetOperation()
	require.True(t, prepare(t, c, agent, payKey, "pay_invoice", invoiceArgs(t, 4900)).GetReplayed())
	_, err := c.Prepare(harness.Ctx(agent, payKey), &opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 49000)})
	requireReason(t, err, codes.AlreadyExists, "IDEMPOTENCY_KEY_REUSED")
	_, err = c.Prepare(harness.Ctx(agent, payKey+"-bad"), &opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1",
		Args: mustStruct(t, map[string]any{"invoice_id": "INV-2048", "amount_minor": 4900, "currency": "eur"})})
	requireReason(t, err, codes.InvalidArgument, "ARGS_INVALID")
	_, err = c.Prepare(harness.Ctx(agent, payKey+strings.Repeat("x", 300)), &opledgerv1.PrepareRequest{Tool: "pay_invoice", ToolVersion: "1", Args: invoiceArgs(t, 4900)})
	requireReason(t, err, codes.InvalidArgument, "IDEMPOTENCY_KEY_INVALID")

	_, err = c.Approve(harness.Ctx(approver, ""), &opledgerv1.ApproveRequest{OperationId: pay.GetId(),
		Fingerprint: pay.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "ok"})
	require.NoError(t, err)
	ex, err := c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: pay.GetId(), Wait: durationpb.New(0)})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, ex.GetOperation().GetState())

	mail := prepare(t, c, agent, mailKey, "send_email", emailArgs(t, body)).GetOperation()
	ex, err = c.Execute(harness.Ctx(agent, ""), &opledgerv1.ExecuteRequest{OperationId: mail.GetId()})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, ex.GetOperation().GetState())
	get(t, c, agent, mail.GetId(), true)

	out := logs.String()
	require.Contains(t, out, `"idempotency_key_digest":"`+interceptors.KeyDigest(payKey)+`"`,
		"the calls were logged, with the key's digest")
	for _, secret := range []string{payKey, mailKey, "INV-2048", "7731-XK", "ap@example.com", agent, approver} {
		require.NotContains(t, out, secret)
	}
}
