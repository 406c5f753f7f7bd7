package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/service"
)

// TestMCPListenerClosesSlowClients (issue 39): `opledger mcp --listen`
// cuts off a client that trickles a request's body, or its headers, once
// --body-timeout (or --header-timeout) has passed.
func TestMCPListenerClosesSlowClients(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	srv := env.StartServer(harness.ServerOptions{NoReconciler: true})
	cfg := MCPConfig{Listen: "127.0.0.1:0", Wait: time.Second, CallTimeout: 10 * time.Second, SessionTimeout: time.Minute,
		StartTimeout: 30 * time.Second, LogLevel: "error",
		Timeouts: service.Timeouts{Header: 300 * time.Millisecond, Body: 600 * time.Millisecond}}
	cfg.Conn.Target, cfg.Conn.APIKey = srv.Addr, env.Key("acme", "agent")
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- runMCP(ctx, cfg, io.Discard, func(a string) { addr <- a }) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	var at string
	select {
	case at = <-addr:
	case err := <-done:
		t.Fatalf("mcp did not start: %v", err)
	}
	const every, limit = 50 * time.Millisecond, 10 * time.Second
	took := harness.Trickle(t, at, []byte("POST /mcp HTTP/1.1\r\nHost: opledger\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n"), []byte(" "), every, limit)
	t.Logf("mcp: a trickled body was cut off after %s", took)
	took = harness.Trickle(t, at, []byte("POST /mcp HTTP/1.1\r\nHost: opledger\r\nX-Slow: "), []byte("a"), every, limit)
	t.Logf("mcp: trickled headers were cut off after %s", took)

	// A call that runs past the body timeout, its request read, is
	// answered: the bound ends with the body.
	env.Fakepay.SetFaults(fakepay.Faults{Delay: 1500 * time.Millisecond})
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "opledger-test", Version: "1"}, nil).
		Connect(cctx, &mcp.StreamableClientTransport{Endpoint: "http://" + at + "/mcp"}, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "send_email",
		Arguments: map[string]any{"to": "ap@example.com", "subject": "s", "body": "b"}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%+v", res.StructuredContent)
	require.Contains(t, res.StructuredContent, "status")
	require.Equal(t, "succeeded", res.StructuredContent.(map[string]any)["status"], "%+v", res.StructuredContent)
}
