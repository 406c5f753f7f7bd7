package mcpgateway

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
)

// TestWithdrawnHostKeyedCallRecordsNothing: a call the host withdrew (its
// context cancelled) before the ledger answered is not looked up under its
// key afterwards, which would record the operation it gave up (for a tool
// needing approval, a request to its approvers that nobody follows).
func TestWithdrawnHostKeyedCallRecordsNothing(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{ToolsYAML: examples.ToolsYAML})
	srv := env.StartServer(harness.ServerOptions{})
	agent := env.Key(harness.Unique("mcp"), "agent")
	c, err := Dial(ConnConfig{Target: srv.Addr, APIKey: agent})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := New(ctx, c, Options{})
	require.NoError(t, err)
	var pay *opledgerv1.Tool
	for _, tl := range g.tools {
		if tl.GetName() == "pay_invoice" {
			pay = tl
		}
	}
	require.NotNil(t, pay)
	withdrawn, stop := context.WithCancel(context.Background())
	stop()
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "pay_invoice",
		Arguments: []byte(`{"invoice_id":"INV-7","amount_minor":4900,"currency":"EUR"}`),
		Meta:      mcp.Meta{MetaIdempotencyKey: "host-withdrawn-1"}}}
	_, err = g.toolHandler(pay)(withdrawn, req)
	require.NoError(t, err)
	list, err := c.ListOperations(ctx)
	require.NoError(t, err)
	require.Empty(t, list.GetOperations(), "the withdrawn call recorded an operation")
}
