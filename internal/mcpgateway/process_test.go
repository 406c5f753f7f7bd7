package mcpgateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/mcpgateway"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgcluster"
)

// gatewayEnv is the environment of an `opledger mcp` process for w: the
// in-process ledger's address (loopback, so plaintext) and the agent key.
func (w *world) gatewayEnv() []string {
	return append(os.Environ(), "OPLEDGER_TARGET="+w.srv.Addr, "OPLEDGER_API_KEY="+w.agent, "OPLEDGER_LOG_LEVEL=warn")
}

// TestStdioBinary drives the built `opledger mcp` binary as an MCP host
// does, as a subprocess over stdio with the go-sdk client: listing, a call
// and its retry (one e-mail), a payment that awaits approval and runs once
// approved (one charge).
func TestStdioBinary(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	cmd := exec.Command(harness.Binary(t), "mcp")
	cmd.Env = w.gatewayEnv()
	var stderr syncWriter
	cmd.Stderr = &stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "opledger-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	defer func() {
		require.NoError(t, cs.Close(), "the gateway exits when the host closes stdin; stderr:\n%s", stderr.String())
	}()

	listed, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range listed.Tools {
		names = append(names, tl.Name)
	}
	require.ElementsMatch(t, []string{"pay_invoice", "send_email", mcpgateway.CheckOperationTool}, names)

	email := map[string]any{"to": "stdio@example.com", "subject": "Hi", "body": "From stdio."}
	_, first := call(t, cs, "send_email", email, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, first.Status)
	_, retry := call(t, cs, "send_email", email, nil)
	require.Equal(t, first.OperationID, retry.OperationID)
	require.True(t, retry.Replayed)
	require.Len(t, w.env.Fakepay.Emails(), 1)

	res, a := call(t, cs, "pay_invoice", map[string]any{"invoice_id": "INV-STDIO", "amount_minor": 700, "currency": "USD"}, nil)
	require.False(t, res.IsError)
	require.Equal(t, mcpgateway.StatusAwaitingApproval, a.Status)
	require.Empty(t, w.env.Fakepay.Charges())
	w.approve(a.OperationID, a.Fingerprint)
	_, done := call(t, cs, mcpgateway.CheckOperationTool, map[string]any{"operation_id": a.OperationID}, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, done.Status)
	require.Len(t, w.env.Fakepay.Charges(), 1)
	require.NotContains(t, stderr.String(), w.agent, "the agent key is never logged")
}

// TestPythonClient drives the gateway with the Python `mcp` package from
// PyPI (testdata/mcp_client.py), over stdio (the binary as its subprocess)
// and over streamable HTTP (an `opledger mcp --listen` process).
func TestPythonClient(t *testing.T) {
	t.Parallel()
	py := mcpPython(t)
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, demoTools())
			target := harness.Binary(t)
			if mode == "http" {
				target = "http://" + w.startHTTPProcess() + "/mcp"
			}
			w.runPython(py, mode, target)
		})
	}
}

// runPython runs testdata/mcp_client.py and checks each step it reports.
func (w *world) runPython(py, mode, target string) {
	t := w.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "mcp_client.py"), mode, target)
	cmd.Env = w.gatewayEnv()
	var stderr syncWriter
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	steps := map[string]map[string]any{}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var step map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &step), "line %q", sc.Text())
		name := step["step"].(string)
		steps[name] = step
		if name == "awaiting" {
			st := step["structured"].(map[string]any)
			require.Equal(t, false, step["is_error"], "awaiting approval is no error")
			require.Equal(t, mcpgateway.StatusAwaitingApproval, st["status"], step["text"])
			require.Empty(t, w.env.Fakepay.Charges(), "nothing is charged before the approval")
			w.approve(st["operation_id"].(string), st["fingerprint"].(string))
			_, err := io.WriteString(stdin, "approved\n")
			require.NoError(t, err)
		}
	}
	err = cmd.Wait()
	require.NoError(t, err, "mcp_client.py %s; stderr:\n%s", mode, stderr.String())
	// The go-sdk names its priming event "prime", which the Python client logs as "Unknown SSE
	// event: prime" on every request; the gateway sends it unnamed, as the specification has it.
	require.NotContains(t, stderr.String(), "Unknown SSE event", "mcp_client.py %s", mode)

	t.Logf("%s: the Python client negotiated MCP %v", mode, steps["list"]["protocol_version"])
	tools := steps["list"]["tools"].(map[string]any)
	require.Len(t, tools, 3)
	pay := tools["pay_invoice"].(map[string]any)
	require.Equal(t, map[string]any{"destructiveHint": true, "idempotentHint": false, "openWorldHint": true, "readOnlyHint": false}, pay["annotations"])
	require.Equal(t, "object", pay["input_schema"].(map[string]any)["type"])
	require.ElementsMatch(t, []any{"invoice_id", "amount_minor", "currency"}, pay["input_schema"].(map[string]any)["required"])
	require.Equal(t, "1", pay["meta"].(map[string]any)["opledger/tool_version"])
	check := tools[mcpgateway.CheckOperationTool].(map[string]any)
	require.Equal(t, true, check["annotations"].(map[string]any)["idempotentHint"])

	email := steps["email"]
	first := email["first"].(map[string]any)["structured"].(map[string]any)
	retry := email["retry"].(map[string]any)["structured"].(map[string]any)
	require.Equal(t, mcpgateway.StatusSucceeded, first["status"])
	require.Equal(t, false, first["replayed"])
	require.Equal(t, first["operation_id"], retry["operation_id"], "the Python client's retry is the same operation")
	require.Equal(t, true, retry["replayed"])
	require.Len(t, w.env.Fakepay.Emails(), 1, "a call and its retry, one e-mail")

	checked := steps["checked"]
	c1 := checked["first"].(map[string]any)["structured"].(map[string]any)
	c2 := checked["again"].(map[string]any)["structured"].(map[string]any)
	require.Equal(t, mcpgateway.StatusSucceeded, c1["status"], checked["first"].(map[string]any)["text"])
	require.Equal(t, mcpgateway.StatusSucceeded, c2["status"])
	require.Equal(t, true, c2["replayed"])
	charges := w.env.Fakepay.Charges()
	require.Len(t, charges, 1, "one approved payment, one charge")
	require.Equal(t, charges[0].ID, c1["external_ref"])
}

// startHTTPProcess starts `opledger mcp --listen` on a free loopback port
// and returns its address once it accepts connections.
func (w *world) startHTTPProcess() string {
	addr, _ := w.startHTTPProcessLogs()
	return addr
}

// startHTTPProcessLogs is startHTTPProcess, with the process's output; env
// is added to (and overrides) gatewayEnv's.
func (w *world) startHTTPProcessLogs(env ...string) (string, *syncWriter) {
	t := w.t
	port, err := pgcluster.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(harness.Binary(t), "mcp", "--listen", addr)
	cmd.Env = append(w.gatewayEnv(), env...)
	logs := &syncWriter{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return addr, logs
		}
		select {
		case <-exited:
			t.Fatalf("opledger mcp --listen exited:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("opledger mcp --listen did not listen on %s:\n%s", addr, logs.String())
		}
	}
}

// mcpPython is the Python interpreter with the `mcp` package:
// $OPLEDGER_MCP_PYTHON, or bin/mcp-venv (make mcp-venv). Without one the
// test is skipped on a developer's machine and fails in CI.
func mcpPython(t *testing.T) string {
	if p := os.Getenv("OPLEDGER_MCP_PYTHON"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(file))), "bin", "mcp-venv", "bin", "python")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	msg := "no Python with the mcp package: run 'make mcp-venv' or set OPLEDGER_MCP_PYTHON"
	if os.Getenv("CI") != "" || os.Getenv("OPLEDGER_REQUIRE_MCP_PYTHON") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// syncWriter collects a process's output for failure messages.
type syncWriter struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestLogLinesNameOneComponent: every JSON log line of `opledger mcp` carries "component" at most
// once. The go-sdk's lines carried it twice ("mcp", then "go-sdk"): the command's logger had one,
// and the gateway added its own for the SDK.
func TestLogLinesNameOneComponent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, demoTools())
	addr, logs := w.startHTTPProcessLogs("OPLEDGER_LOG_LEVEL=info")
	cs := connectHTTP(t, "http://"+addr+"/mcp", nil)
	_, ans := call(t, cs, "send_email", map[string]any{"to": "a@example.com", "subject": "s", "body": "b"}, nil)
	require.Equal(t, mcpgateway.StatusSucceeded, ans.Status)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), `"component":"go-sdk"`) {
		require.True(t, time.Now().Before(deadline), "no go-sdk log line:\n%s", logs.String())
		time.Sleep(50 * time.Millisecond)
	}
	components := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		require.LessOrEqual(t, strings.Count(line, `"component":`), 1, "line %s", line)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "line %s", line)
		if c, ok := m["component"].(string); ok {
			components[c] = true
		}
	}
	require.True(t, components["mcp"], "the gateway's own lines say component mcp:\n%s", logs.String())
	require.True(t, components["go-sdk"], "the SDK's lines say component go-sdk")
}
