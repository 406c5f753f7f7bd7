package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proof/pgcluster"
)

// ok is a completed call in a synthetic history.
func ok(call int64, f, op, state, ref string) Event {
	return Event{Type: EventOK, Process: "w1", Call: call, F: f, Server: 1, Op: op, State: state, Ref: ref}
}

// world is a small clean outcome the tests below spoil one way each.
func world() CheckInput {
	return CheckInput{
		Observations: []Event{
			func() Event { e := ok(1, "prepare", "op_a", StateAwaitingApproval, ""); e.Key = "ka"; return e }(),
			ok(2, "execute", "op_a", StateSucceeded, "ch_1"),
			func() Event { e := ok(3, "prepare", "op_b", StateReady, ""); e.Key = "kb"; return e }(),
			ok(4, "execute", "op_b", StateOutcomeUnknown, ""),
			func() Event { e := ok(5, "prepare", "op_c", StateReady, ""); e.Key = "kc"; return e }(),
			ok(6, "execute", "op_c", StateOutcomeUnknown, ""),
		},
		Ops: map[string]FinalOp{
			"op_a": {ID: "op_a", Tool: ToolPay, State: StateSucceeded, ExternalRef: "ch_1", DownstreamKey: "opk_a"},
			"op_b": {ID: "op_b", Tool: ToolEmail, State: StateOutcomeUnknown, DownstreamKey: "opk_b"},
			// Reconciled: unknown at first, found at the processor later.
			"op_c": {ID: "op_c", Tool: ToolPay, State: StateSucceeded, ExternalRef: "ch_3", DownstreamKey: "opk_c"},
		},
		Effects: []Effect{
			{Kind: "charge", ID: "ch_1", Key: "opk_a"},
			{Kind: "email", ID: "em_2", Key: "opk_b"},
			{Kind: "charge", ID: "ch_3", Key: "opk_c"},
		},
		Policies: policies(),
	}
}

func TestCheckerCleanHistory(t *testing.T) {
	t.Parallel()
	r := Check(world())
	require.True(t, r.OK(), "%+v", r.Violations)
	require.Equal(t, 3, r.Ops)
	require.Equal(t, 1, r.Unknown, "an e-mail's unknown outcome is truthful")
	require.Equal(t, 2, r.Succeeded)
}

func TestCheckerFlagsDuplicate(t *testing.T) {
	t.Parallel()
	in := world()
	// A second charge under the same operation: the same key, or the key
	// with a per-attempt suffix as the control run sends.
	in.Effects = append(in.Effects, Effect{Kind: "charge", ID: "ch_1b", Key: "opk_a"}, Effect{Kind: "charge", ID: "ch_1c", Key: "opk_a.2"})
	r := Check(in)
	require.Equal(t, 2, r.Duplicates)
	require.Zero(t, r.Lost+r.Stuck+r.Inconsistent)
	require.Equal(t, "op_a", r.Violations[0].Op)
}

func TestCheckerFlagsLostSuccess(t *testing.T) {
	t.Parallel()
	in := world()
	// The ledger says SUCCEEDED, the processor has nothing.
	in.Effects = in.Effects[1:]
	r := Check(in)
	require.Equal(t, 1, r.Lost)
	require.Equal(t, ViolationLost, r.Violations[0].Kind)

	// The processor charged, the ledger says it did not.
	in = world()
	in.Ops["op_c"] = FinalOp{ID: "op_c", Tool: ToolPay, State: StateReady, DownstreamKey: "opk_c"}
	r = Check(in)
	require.Equal(t, 1, r.Lost)
}

func TestCheckerFlagsInconsistentAnswer(t *testing.T) {
	t.Parallel()
	// A client told SUCCEEDED, the operation ends FAILED.
	in := world()
	in.Observations = append(in.Observations, ok(7, "execute", "op_c", StateFailed, ""))
	r := Check(in)
	require.Equal(t, 1, r.Inconsistent)
	require.Contains(t, r.Violations[0].Detail, "told FAILED")

	// A client saw another external reference than the final one.
	in = world()
	in.Observations = append(in.Observations, ok(7, "get", "op_a", StateSucceeded, "ch_other"))
	r = Check(in)
	require.Equal(t, 1, r.Inconsistent)

	// The ledger's reference is not the processor's.
	in = world()
	in.Ops["op_a"] = FinalOp{ID: "op_a", Tool: ToolPay, State: StateSucceeded, ExternalRef: "ch_9", DownstreamKey: "opk_a"}
	in.Observations = in.Observations[2:]
	r = Check(in)
	require.Equal(t, 1, r.Inconsistent)

	// One idempotency key answered with two operations.
	in = world()
	twin := ok(8, "prepare", "op_b", StateReady, "")
	twin.Key = "ka"
	in.Observations = append(in.Observations, twin)
	r = Check(in)
	require.Equal(t, 1, r.Inconsistent)

	// An effect nobody accounts for.
	in = world()
	in.Effects = append(in.Effects, Effect{Kind: "charge", ID: "ch_x", Key: "opk_nobody"})
	r = Check(in)
	require.Equal(t, 1, r.Inconsistent)
}

func TestCheckerFlagsStuck(t *testing.T) {
	t.Parallel()
	in := world()
	in.Ops["op_a"] = FinalOp{ID: "op_a", Tool: ToolPay, State: StateExecuting, DownstreamKey: "opk_a"}
	in.Ops["op_c"] = FinalOp{ID: "op_c", Tool: ToolPay, State: StateOutcomeUnknown, DownstreamKey: "opk_c"}
	in.Observations = in.Observations[2:]
	r := Check(in)
	// EXECUTING is stuck, and so is an unknown outcome on a tool whose
	// downstream dedupes keys and can be looked up; op_a's charge is not
	// lost (EXECUTING claims nothing) and the e-mail's unknown is allowed.
	require.Equal(t, 2, r.Stuck, "%+v", r.Violations)
	require.Equal(t, 1, r.Unknown)
}

func TestHistoryJSONLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := NewHistory(&buf)
	h.Record(Event{Type: EventInvoke, Process: "w1", Call: h.NextCall(), F: "execute", Op: "op_a"})
	h.Record(ok(1, "execute", "op_a", StateSucceeded, "ch_1"))
	require.NoError(t, h.Flush())
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var e Event
	require.NoError(t, json.Unmarshal(lines[1], &e))
	require.Equal(t, int64(2), e.Seq)
	require.Equal(t, StateSucceeded, e.State)
	require.Len(t, h.Observations(), 1, "only completions that name an operation are kept")
}

// echoServer echoes every connection back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func TestProxyFaults(t *testing.T) {
	t.Parallel()
	p, err := NewProxy(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	roundTrip := func(c net.Conn, msg string) error {
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		if err == nil && string(buf) != msg {
			t.Fatalf("echo %q, got %q", msg, buf)
		}
		return err
	}
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, roundTrip(c, "hello"))

	// Blackhole: nothing comes back until the fault heals, then it does.
	p.Set(NetBlackhole, 0)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	err = roundTrip(c, "held")
	require.Error(t, err)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	p.Heal()
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "held", string(buf))

	// Latency still delivers, in order.
	p.Set(NetLatency, 20*time.Millisecond)
	require.NoError(t, roundTrip(c, "slow"))
	p.Heal()

	// Reset: the open connection dies, and so does a new one while the
	// fault lasts.
	p.Set(NetReset, 0)
	require.Error(t, roundTrip(c, "gone"))
	// The reset may hit the new connection during the dial itself or on
	// its first round trip; either way nothing gets through.
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c2.Close()
		require.Error(t, roundTrip(c2, "refused"))
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c3.Close()
	require.NoError(t, roundTrip(c3, "back"))
}

// chaosBinary builds cmd/opledger with failpoints, or takes
// OPLEDGER_CHAOS_BINARY when set (a binary built beforehand).
func chaosBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("OPLEDGER_CHAOS_BINARY"); b != "" {
		return b
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
	bin := filepath.Join(t.TempDir(), "opledger")
	cmd := exec.Command("go", "build", "-tags", "failpoints", "-o", bin, "./cmd/opledger")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// TestTinyRun runs the whole suite briefly: three real servers, every
// fault the schedule reaches in the time, and a clean check.
func TestTinyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and three servers")
	}
	if _, err := pgcluster.FindBinDir(); err != nil {
		t.Skip(err)
	}
	t.Parallel()
	var hist, logs bytes.Buffer
	s, err := Run(context.Background(), Options{
		Binary: chaosBinary(t), Duration: 15 * time.Second, Workers: 6, Seed: 1,
		Failpoints: true, History: &hist, Log: &logs,
	})
	require.NoError(t, err, "log:\n%s", logs.String())
	t.Log(s.Line())
	require.True(t, s.Check.OK(), "violations: %+v\nlog:\n%s", s.Check.Violations, logs.String())
	require.NoError(t, s.Err(false))
	require.Positive(t, s.Ops)
	require.Positive(t, s.Check.Succeeded)
	require.Contains(t, hist.String(), `"type":"nemesis"`)
	require.Contains(t, hist.String(), `"type":"summary"`)
}
