package mcpgateway_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	client "github.com/opledger/opledger/clients/go"
	"github.com/opledger/opledger/internal/mcpgateway"
	"github.com/opledger/opledger/proof/harness"
)

// TestUnreachableDownstreamUnderHostKeyIsNotRetryAdvice: the downstream
// cannot be reached, so the ledger records the operation, sends nothing and
// leaves it READY. The answer told the model that calling the tool again
// was safe; under the host's key (each tools/call has its own) that call is
// a second operation, and the first, still READY and named in the answer,
// ran too when the model checked it: two e-mails. The answer points to
// check_operation only, which is safe under either kind of key.
func TestUnreachableDownstreamUnderHostKeyIsNotRetryAdvice(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // connection refused: nothing is sent
	w := newWorld(t, harness.ToolsYAML(harness.ToolSpec{Name: "mail", Kind: harness.KindEmail, URL: "http://" + addr + "/emails"}))
	cs := connectHTTP(t, w.httpGateway(""), nil)
	args := map[string]any{"to": "bob@example.com", "subject": "Receipt", "body": "Thanks."}

	res, a := call(t, cs, "mail", args, mcp.Meta{mcpgateway.MetaIdempotencyKey: "host-toolcall-1"})
	require.Equal(t, string(client.ReasonDownstreamUnavailable), a.Error.Reason, text(res))
	require.NotEmpty(t, a.OperationID)
	require.Contains(t, a.Next, "check_operation with operation_id "+a.OperationID)

	// The downstream comes back (the same address, proxied to the processor).
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	u, err := url.Parse(w.env.FakepayURL)
	require.NoError(t, err)
	hs := &http.Server{Handler: httputil.NewSingleHostReverseProxy(u), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })

	// The model does what the answer says: if it says another call is
	// safe, it makes one (the host gives it its own key); either way it
	// then checks the operation the answer named.
	if strings.Contains(a.Next, "Call") && strings.Contains(a.Next, "again") && strings.Contains(a.Next, "same arguments") {
		_, again := call(t, cs, "mail", args, mcp.Meta{mcpgateway.MetaIdempotencyKey: "host-toolcall-2"})
		t.Logf("second call: %s (%s)", again.Status, again.OperationID)
	}
	_, chk := call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": a.OperationID}, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, chk.Status)
	require.Len(t, w.env.Fakepay.Emails(), 1, "one e-mail asked for, one e-mail sent")
}

// TestNumberADoubleCannotCarryIsRefused: arguments travel to the ledger as
// a protobuf Struct, whose numbers are doubles, so an integer above 2^53
// (9007199254740993 became 9007199254740992) or a decimal with more digits
// than a double holds was silently changed, and the downstream charged an
// amount the model never sent. The gateway, which alone sees the JSON text,
// refuses such a number and says why; numbers a double carries (0.1, 1.0,
// 2^53) pass.
func TestNumberADoubleCannotCarryIsRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.ToolsYAML(harness.ToolSpec{Name: "charge"}))
	cs := connectHTTP(t, w.httpGateway(""), nil)

	for _, amount := range []string{"9007199254740993", "1152921504606846976", "12.00000000000000000001"} {
		res, a := call(t, cs, "charge", json.RawMessage(`{"invoice_id":"INV-1","amount_minor":`+amount+`,"currency":"EUR"}`), nil)
		require.True(t, res.IsError, "%s: refused, not done with another amount: %s", amount, text(res))
		require.NotNil(t, a.Error, text(res))
		require.Equal(t, string(client.ReasonArgsInvalid), a.Error.Reason)
		require.Contains(t, a.Error.Message, amount)
	}
	require.Empty(t, w.env.Fakepay.Charges(), "nothing charged")

	for i, amount := range []string{"9007199254740992", "1200", "1.2e3"} {
		_, a := call(t, cs, "charge", json.RawMessage(`{"invoice_id":"INV-`+string(rune('2'+i))+`","amount_minor":`+amount+`,"currency":"EUR"}`), nil)
		require.Equal(t, mcpgateway.StatusSucceeded, a.Status, amount)
	}
}
