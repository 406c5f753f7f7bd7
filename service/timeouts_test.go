package service_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opledger/opledger/executor"
	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/fakepay"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/service"
)

// slowTimeouts are short timeouts for the slow-client tests.
var slowTimeouts = service.Timeouts{Header: 300 * time.Millisecond, Body: 600 * time.Millisecond}

// hookedTools: one tool that takes webhooks, so that the webhook listener
// reads the trickled body.
const hookedTools = `
tools:
  - name: hooked
    version: "1"
    effect: side_effect
    args_schema: {type: object}
    executor:
      type: http
      url: http://127.0.0.1:9/charges
      webhook_secret: webhook-secret-0123456789
  - name: slow
    version: "1"
    effect: side_effect
    args_schema: {type: object}
    executor:
      type: http
      url: ${OPLEDGER_FAKEPAY_URL}/emails
`

// runListeners runs a service with every listener on, with timeouts t, and
// returns where each listens.
func runListeners(t *testing.T, timeouts service.Timeouts) (service.Ready, *harness.Env) {
	t.Helper()
	env := harness.New(t, harness.Options{ToolsYAML: []byte(hookedTools)})
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, service.Config{DatabaseURL: env.DBURL, DownstreamSecret: env.Secret, Drain: time.Second,
		ConsoleListen: "127.0.0.1:0", WebhookListen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Timeouts: timeouts},
		service.Options{Logger: logger, Tools: env.Tools(), Executors: executor.NewDefaultRegistry(nil, logger), NoReconciler: true,
			Ledger: func(c *ledger.Config) { c.DownstreamSecret = env.Secret }})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ready := make(chan service.Ready, 1)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, lis, func(r service.Ready) { ready <- r }) }()
	t.Cleanup(func() { cancel(); <-done })
	return <-ready, env
}

// TestListenersCloseSlowClients (issue 39): a client that trickles a
// request's body, or its headers, one byte every 50 ms is cut off by every
// HTTP listener (webhooks, console, metrics) once the body timeout (or the
// header timeout) has passed, and so is a gRPC call whose request message
// trickles in, and a gRPC connection that never finishes its setup.
func TestListenersCloseSlowClients(t *testing.T) {
	t.Parallel()
	r, env := runListeners(t, slowTimeouts)
	const every, limit = 50 * time.Millisecond, 10 * time.Second
	body := func(path string) []byte {
		return []byte("POST " + path + " HTTP/1.1\r\nHost: opledger\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\n")
	}
	for _, c := range []struct{ name, addr, path string }{ // CONTROL
		{"webhooks", r.WebhookAddr, "/webhooks/hooked"},
		{"console", consoleAddr(t, r.ConsoleURL), "/login"},
		{"metrics", r.MetricsAddr, "/metrics"},
	} {
		took := harness.Trickle(t, c.addr, body(c.path), []byte("a"), every, limit)
		t.Logf("%s: a trickled body was cut off after %s", c.name, took)
		took = harness.Trickle(t, c.addr, []byte("GET "+c.path+" HTTP/1.1\r\nHost: opledger\r\nX-Slow: "), []byte("a"), every, limit)
		t.Logf("%s: trickled headers were cut off after %s", c.name, took)
	}

	took := harness.Trickle(t, r.Addr, []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n"), nil, every, limit)
	t.Logf("gRPC: an unfinished connection setup was cut off after %s", took)
	took = trickleGRPC(t, r.Addr, every, limit)
	t.Logf("gRPC: a trickled request message was cut off after %s", took)

	// A call that runs past the body timeout, its message in, is answered.
	env.Fakepay.SetFaults(fakepay.Faults{Delay: 3 * slowTimeouts.Body})
	client := harness.Dial(t, r.Addr)
	p, err := client.Prepare(harness.Ctx(env.Key("acme", "agent"), "slow-1"),
		&opledgerv1.PrepareRequest{Tool: "slow", Args: &structpb.Struct{}, Execute: true})
	require.NoError(t, err)
	require.Equal(t, opledgerv1.State_STATE_SUCCEEDED, p.GetOperation().GetState())
}

func consoleAddr(t *testing.T, consoleURL string) string {
	t.Helper()
	host, ok := bytes.CutPrefix([]byte(consoleURL), []byte("http://"))
	require.True(t, ok, consoleURL)
	return string(host)
}

// trickleGRPC is a gRPC client over a raw HTTP/2 connection that starts a
// Get and sends its request message one byte every interval. It returns how
// long the server took to end the call (a RST_STREAM or the call's
// trailers), and fails t when it has not within limit.
func trickleGRPC(t *testing.T, addr string, every, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, http2.ClientPreface)
	require.NoError(t, err)
	w := http2.NewFramer(conn, nil)
	require.NoError(t, w.WriteSettings())
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/opledger.v1.LedgerService/Get"},
		{":authority", "opledger"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	require.NoError(t, w.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}))
	require.NoError(t, w.WriteData(1, false, []byte{0, 0, 0, 0x10, 0})) // an uncompressed message of 4096 bytes

	ended := make(chan string, 1)
	go func() {
		rd := http2.NewFramer(io.Discard, conn)
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				ended <- "the connection: " + err.Error()
				return
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				ended <- "RST_STREAM " + f.ErrCode.String()
				return
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					ended <- "trailers"
					return
				}
			case *http2.GoAwayFrame:
				ended <- "GOAWAY"
				return
			}
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	give := time.NewTimer(limit)
	defer give.Stop()
	for i := 0; ; i++ {
		select {
		case how := <-ended:
			t.Logf("gRPC: the call ended with %s", how)
			return time.Since(start)
		case <-give.C:
			t.Fatalf("gRPC: the server still holds a call whose message trickled in for %s (%d bytes)", limit, i)
		case <-tick.C:
			_ = w.WriteData(1, false, []byte{0x0a})
		}
	}
}
