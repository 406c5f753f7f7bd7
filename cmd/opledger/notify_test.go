package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/server"
)

// TestApprovalNotificationSurvivesCrashes: the notification is written with
// the operation, so neither a server killed right after Prepare committed
// nor one killed while the receiver was failing loses it; the restarted
// server delivers it, signed, with the same id.
func TestApprovalNotificationSurvivesCrashes(t *testing.T) {
	t.Parallel()
	env := harness.New(t, harness.Options{})
	const secret = "notification-secret-0123456789"
	var mu sync.Mutex
	var statuses []int
	var bodies [][]byte
	failing := true
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		status := http.StatusOK
		if failing || !server.VerifySignature(secret, r.Header.Get(ledger.SignatureHeader), body, time.Now()) {
			status = http.StatusServiceUnavailable
		}
		statuses, bodies = append(statuses, status), append(bodies, body)
		w.WriteHeader(status)
	}))
	t.Cleanup(recv.Close)
	seen := func() ([]int, [][]byte) {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), statuses...), append([][]byte(nil), bodies...)
	}
	queued := func() (n int, lastError string) {
		conn, err := pgx.Connect(t.Context(), env.DBURL)
		require.NoError(t, err)
		defer conn.Close(t.Context())
		var e *string
		err = conn.QueryRow(t.Context(), "SELECT count(*) OVER (), last_error FROM approval_notification").Scan(&n, &e)
		if err == pgx.ErrNoRows {
			return 0, ""
		}
		require.NoError(t, err)
		if e != nil {
			lastError = *e
		}
		return n, lastError
	}

	p := env.StartProcess(harness.ProcessOptions{Env: []string{
		"OPLEDGER_APPROVAL_WEBHOOK_URL=" + recv.URL, "OPLEDGER_APPROVAL_WEBHOOK_SECRET=" + secret,
		"OPLEDGER_CONSOLE_URL=https://approvals.example.com",
		// A long first backoff, so the server is killed between attempts,
		// never during one.
		"OPLEDGER_APPROVAL_WEBHOOK_BACKOFF=2s",
		"OPLEDGER_FAILPOINTS=after-prepare=1*kill",
	}})
	agent := env.Key("acme", "agent")
	args, err := structpb.NewStruct(map[string]any{"invoice_id": "INV-CRASH", "amount_minor": 4900, "currency": "EUR"})
	require.NoError(t, err)
	req := &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: args}

	// 1. Killed right after the operation committed: nothing was sent.
	_, err = p.Client.Prepare(harness.Ctx(agent, "crash-1"), req)
	require.Error(t, err, "the server died mid-call")
	require.True(t, p.Wait(10*time.Second), "the failpoint killed the server")
	n, _ := queued()
	require.Equal(t, 1, n, "the notification committed with the operation")
	got, _ := seen()
	require.Empty(t, got)

	// 2. Restarted: the receiver fails; the server is killed after the
	// failure was recorded and before the retry.
	p.Restart("OPLEDGER_FAILPOINTS=")
	prep, err := p.Client.Prepare(harness.Ctx(agent, "crash-1"), req)
	require.NoError(t, err)
	require.True(t, prep.GetReplayed(), "the operation survived the crash")
	opID := prep.GetOperation().GetId()
	require.Eventually(t, func() bool { _, e := queued(); return e != "" }, 20*time.Second, 20*time.Millisecond,
		"the failed attempt is recorded")
	p.Kill()
	got, _ = seen()
	require.Equal(t, []int{http.StatusServiceUnavailable}, got)

	// 3. Restarted with a receiver that works: delivered once, same id.
	mu.Lock()
	failing = false
	mu.Unlock()
	p.Restart()
	require.Eventually(t, func() bool { n, _ := queued(); return n == 0 }, 20*time.Second, 20*time.Millisecond,
		"the restarted server delivers it")
	got, sent := seen()
	require.Equal(t, []int{http.StatusServiceUnavailable, http.StatusOK}, got)
	var first, last ledger.Notification
	require.NoError(t, json.Unmarshal(sent[0], &first))
	require.NoError(t, json.Unmarshal(sent[1], &last))
	require.Equal(t, opID+"/1", first.ID)
	require.Equal(t, first.ID, last.ID)
	require.Equal(t, "https://approvals.example.com/operations/"+opID, last.ConsoleURL)
	require.NotContains(t, string(sent[1]), "INV-CRASH")
}
