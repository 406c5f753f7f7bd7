package service_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
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

// TestApprovalNotificationLinksTheConsoleItServes: without --console-url the
// notification links to the console's own address. With the console on a
// port the system picks (127.0.0.1:0), that is the port it listens on (as
// Ready.ConsoleURL and the log report it), never port 0.
func TestApprovalNotificationLinksTheConsoleItServes(t *testing.T) {
	t.Parallel()
	got := make(chan ledger.Notification, 8)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n ledger.Notification
		_ = json.NewDecoder(r.Body).Decode(&n)
		got <- n
	}))
	t.Cleanup(recv.Close)
	env := harness.New(t, harness.Options{})
	agent := env.Key("acme", "agent")
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	svc, err := service.New(ctx, service.Config{DatabaseURL: env.DBURL, DownstreamSecret: env.Secret,
		ConsoleListen: "127.0.0.1:0", ApprovalWebhookURL: recv.URL, ApprovalWebhookSecret: "notification-secret-0123456789"},
		service.Options{Logger: logger, Tools: env.Tools(), Executors: executor.NewDefaultRegistry(nil, logger), NoReconciler: true,
			Ledger: func(c *ledger.Config) { c.DownstreamSecret = env.Secret }})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ready := make(chan service.Ready, 1)
	go func() { _ = svc.Run(ctx, lis, func(r service.Ready) { ready <- r }) }()
	var r service.Ready
	select {
	case r = <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("the service never became ready")
	}
	require.NotContains(t, r.ConsoleURL, ":0")

	args, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-LINK", "amount_minor": 4900, "currency": "EUR"})
	require.NoError(t, err)
	prep, err := harness.Dial(t, r.Addr).Prepare(harness.Ctx(agent, "link-1"), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args})
	require.NoError(t, err)
	select {
	case n := <-got:
		require.Equal(t, r.ConsoleURL+"/operations/"+prep.GetOperation().GetId(), n.ConsoleURL,
			"the link opens the console this process serves")
	case <-time.After(20 * time.Second):
		t.Fatal("no notification")
	}
}
