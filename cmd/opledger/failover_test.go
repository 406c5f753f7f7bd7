package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgcluster"
	"github.com/opledger/opledger/store"
)

// startFormation starts a pg_auto_failover formation (synchronous
// replication) with the opledger schema, or skips where pg_auto_failover is
// not installed (never in CI, which installs it).
func startFormation(t *testing.T) *pgcluster.AutoFailover {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a pg_auto_failover formation")
	}
	if _, _, err := pgcluster.FindAutoCtl(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("/tmp", "ha-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	a, err := pgcluster.StartAutoFailover(t.Context(), pgcluster.AutoFailoverOptions{Dir: dir, Database: "opledger"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	_, err = store.Migrate(t.Context(), a.URL("opledger"))
	require.NoError(t, err)
	return a
}

// reasonOf is the ErrorInfo reason of a status error.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// TestFailoverDuringCalls runs a real `opledger serve` on a multi-host
// DATABASE_URL that names the standby first, keeps agents calling, and
// kills the primary (SIGKILL of its pg_auto_failover keeper and
// PostgreSQL). Every call answers success or UNAVAILABLE with
// LEDGER_UNAVAILABLE (safe to retry) — never INTERNAL —, the same process
// serves again from the new primary without a restart, every operation
// ends with exactly one charge, and the notification listener listens on
// the new primary.
func TestFailoverDuringCalls(t *testing.T) {
	a := startFormation(t)
	url := pgcluster.MultiHostURL([]string{a.NodeAddr(1), a.NodeAddr(0)}, "opledger") + "&connect_timeout=2"
	e := harness.New(t, harness.Options{DatabaseURL: url, ToolsYAML: []byte(fastTools)})
	p := e.StartProcess(harness.ProcessOptions{Env: []string{"OPLEDGER_MIN_LEASE=2s", "OPLEDGER_RECONCILE_INTERVAL=200ms"}})
	agent, approver := e.Key("acme", "agent"), e.Key("acme", "approver")

	l := store.NewListener(url, slog.New(slog.DiscardHandler))
	lctx, stopListener := context.WithCancel(t.Context())
	defer stopListener()
	go l.Run(lctx)

	var mu sync.Mutex
	failures := map[string]int{}
	var unexpected []string
	succeeded := 0
	record := func(step string, err error) {
		mu.Lock()
		defer mu.Unlock()
		code, reason := status.Code(err), reasonOf(err)
		failures[fmt.Sprintf("%s/%s", code, reason)]++
		switch {
		case code == codes.Unavailable && reason == "LEDGER_UNAVAILABLE":
		case code == codes.DeadlineExceeded: // the call's own deadline
		default:
			unexpected = append(unexpected, fmt.Sprintf("%s: %v", step, err))
		}
	}
	// retry makes one call until it succeeds, as a client told "safe to
	// retry" does, with the same request.
	retry := func(ctx context.Context, step string, call func(context.Context) error) bool {
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := call(cctx)
			cancel()
			if err == nil {
				return true
			}
			record(step, err)
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}
	agentFlow := func(ctx context.Context, n int) {
		args, _ := structpb.NewStruct(map[string]any{"invoice_id": fmt.Sprintf("INV-%d", n), "amount_minor": 100 + n, "currency": "EUR"})
		key := fmt.Sprintf("failover-%d", n)
		var op *opledgerv1.Operation
		if !retry(ctx, "prepare", func(c context.Context) error {
			r, err := p.Client.Prepare(withMD(c, agent, key), &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args})
			op = r.GetOperation()
			return err
		}) {
			return
		}
		if !retry(ctx, "approve", func(c context.Context) error {
			_, err := p.Client.Approve(withMD(c, approver, ""), &opledgerv1.ApproveRequest{OperationId: op.GetId(), Fingerprint: op.GetFingerprint(), Decision: opledgerv1.Decision_DECISION_APPROVE})
			return err
		}) {
			return
		}
		retry(ctx, "execute", func(c context.Context) error {
			r, err := p.Client.Execute(withMD(c, agent, ""), &opledgerv1.ExecuteRequest{OperationId: op.GetId(), Wait: durationpb.New(2 * time.Second)})
			if err != nil {
				return err
			}
			if r.GetOperation().GetState() != opledgerv1.State_STATE_SUCCEEDED {
				return status.Error(codes.DeadlineExceeded, "not finished yet: "+r.GetOperation().GetState().String())
			}
			mu.Lock()
			succeeded++
			mu.Unlock()
			return nil
		})
	}

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var next int
	var nextMu sync.Mutex
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				nextMu.Lock()
				next++
				n := next
				nextMu.Unlock()
				agentFlow(context.WithoutCancel(ctx), n)
			}
		})
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	before := succeeded
	mu.Unlock()
	require.Positive(t, before, "operations succeed before the failover")

	primary, err := a.Primary(t.Context())
	require.NoError(t, err)
	a.KillNode(primary)
	begin := time.Now()
	for {
		q, err := a.Primary(t.Context())
		if err == nil && q >= 0 && q != primary {
			break
		}
		require.Less(t, time.Since(begin), time.Minute, "no failover")
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the monitor promoted the standby after %s", time.Since(begin).Round(100*time.Millisecond))
	// Calls succeed again on the same process.
	for {
		mu.Lock()
		after := succeeded
		mu.Unlock()
		if after > before+5 {
			break
		}
		require.Less(t, time.Since(begin), 90*time.Second, "operations do not succeed again after the failover")
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("operations succeed again %s after the kill", time.Since(begin).Round(100*time.Millisecond))
	stop()
	wg.Wait()
	require.False(t, p.Exited(), "the server was not restarted:\n%s", p.Logs())

	mu.Lock()
	t.Logf("failed calls by code/reason: %v; %d operations succeeded", failures, succeeded)
	require.Empty(t, unexpected, "every failure is UNAVAILABLE/LEDGER_UNAVAILABLE (or the call's own deadline)")
	require.Positive(t, failures["Unavailable/LEDGER_UNAVAILABLE"], "the failover was seen by calls")
	charges := map[string]int{}
	for _, c := range e.Fakepay.Charges() {
		charges[c.InvoiceID]++
	}
	for inv, n := range charges {
		require.Equal(t, 1, n, "one charge per invoice (%s)", inv)
	}
	require.GreaterOrEqual(t, len(charges), succeeded)
	mu.Unlock()

	// The listener moved to the new primary: a notification there wakes a
	// waiter by itself.
	newPrimary := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/opledger?sslmode=disable", a.NodePort(1-primary))
	requireWoken(t, l, newPrimary)
}

// withMD authenticates ctx with key and, if set, an idempotency key.
func withMD(ctx context.Context, key, idem string) context.Context {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	if idem != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", idem)
	}
	return ctx
}

// requireWoken waits until a NOTIFY on notifyURL wakes a waiter of l by
// itself (a control waiter tells it from the wake-up of a reconnect).
func requireWoken(t *testing.T, l *store.Listener, notifyURL string) {
	t.Helper()
	id := fmt.Sprintf("op_%d", time.Now().UnixNano())
	target, stopT := l.Subscribe(id)
	defer stopT()
	control, stopC := l.Subscribe(id + "_control")
	defer stopC()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_ = store.AdminExec(t.Context(), notifyURL, "SELECT pg_notify('opledger_operation', '"+id+"')")
		select {
		case <-target:
			select {
			case <-control:
			default:
				return
			}
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatal("no notification from the new primary reached the waiter")
}
