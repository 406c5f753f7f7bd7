package mcpgateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/mcpgateway"
	"github.com/opledger/opledger/proof/harness"
)

// TestMain starts the throwaway PostgreSQL the harness-backed tests use.
func TestMain(m *testing.M) { harness.Main(m) }

// world is one test's ledger: a database, the fake processor over HTTP, an
// in-process server on real TCP, and an agent's and an approver's key in a
// fresh tenant.
type world struct {
	t        *testing.T
	env      *harness.Env
	srv      *harness.Server
	agent    string
	approver string
	tenant   string
}

func newWorld(t *testing.T, toolsYAML []byte) *world {
	t.Helper()
	env := harness.New(t, harness.Options{ToolsYAML: toolsYAML})
	srv := env.StartServer(harness.ServerOptions{})
	tenant := harness.Unique("mcp")
	return &world{t: t, env: env, srv: srv, agent: env.Key(tenant, "agent"), approver: env.Key(tenant, "approver"), tenant: tenant}
}

// gateway builds an in-process gateway with the agent key, over real gRPC.
func (w *world) gateway(opts mcpgateway.Options) *mcpgateway.Gateway {
	w.t.Helper()
	c, err := mcpgateway.Dial(mcpgateway.ConnConfig{Target: w.srv.Addr, APIKey: w.agent})
	require.NoError(w.t, err)
	w.t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := mcpgateway.New(ctx, c, opts)
	require.NoError(w.t, err)
	return g
}

// httpGateway serves a gateway's streamable HTTP transport on a real TCP
// port and returns its /mcp URL.
func (w *world) httpGateway(token string) string {
	w.t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/mcp", w.gateway(mcpgateway.Options{}).HTTPHandler(token))
	hs := httptest.NewServer(mux)
	w.t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// connectHTTP opens an MCP session with the go-sdk client over streamable
// HTTP.
func connectHTTP(t *testing.T, url string, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "opledger-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call makes a tools/call and decodes its structured content.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args any, meta mcp.Meta) (*mcp.CallToolResult, mcpgateway.Answer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
	require.NoError(t, err, "tools/call %s is answered as a tool result, never a protocol error", tool)
	return res, decode(t, res)
}

func decode(t *testing.T, res *mcp.CallToolResult) mcpgateway.Answer {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	var a mcpgateway.Answer
	require.NoError(t, json.Unmarshal(b, &a), "structured content: %s", b)
	require.Len(t, res.Content, 1)
	require.NotEmpty(t, res.Content[0].(*mcp.TextContent).Text)
	return a
}

func text(res *mcp.CallToolResult) string { return res.Content[0].(*mcp.TextContent).Text }

// approve approves an operation as a person would, through the Approve RPC
// with the approver's key and the fingerprint the answer showed.
func (w *world) approve(opID, fingerprint string) {
	w.t.Helper()
	_, err := w.srv.Client.Approve(harness.Ctx(w.approver, ""), &opledgerv1.ApproveRequest{
		OperationId: opID, Fingerprint: fingerprint, Decision: opledgerv1.Decision_DECISION_APPROVE, Reason: "checked the invoice"})
	require.NoError(w.t, err)
}

// extraTools adds a read-only and an idempotent tool to the demo tools, so
// that listing shows every effect's annotations.
var extraTools = `
  - name: lookup_invoice
    version: "2"
    description: Look an invoice up.
    effect: read_only
    args_schema:
      type: object
      properties:
        invoice_id: {type: string}
      required: [invoice_id]
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/charges
  - name: set_limit
    version: "1"
    description: Set a card's spending limit.
    effect: idempotent
    args_schema:
      type: object
      properties:
        limit_minor: {type: integer}
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/charges
`

func demoTools() []byte { return examples.ToolsYAML }
