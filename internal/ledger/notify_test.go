package ledger_test

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/proof/harness"
	"github.com/opledger/opledger/proof/pgtest"
	"github.com/opledger/opledger/server"
)

const notifySecret = "notification-secret-0123456789"

// receiver is a real HTTP endpoint for approval notifications. It answers
// with the statuses queued in fail first (one per request), then 200.
type receiver struct {
	t   *testing.T
	srv *httptest.Server
	mu  sync.Mutex
	got []delivery
	// fail lists the statuses of the next requests; 200 once it is empty.
	fail []int
}

type delivery struct {
	status  int
	body    []byte
	payload ledger.Notification
	header  http.Header
	at      time.Time
}

func newReceiver(t *testing.T, fail ...int) *receiver {
	r := &receiver{t: t, fail: fail}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		d := delivery{status: http.StatusOK, body: body, header: req.Header.Clone(), at: time.Now()}
		_ = json.Unmarshal(body, &d.payload)
		r.mu.Lock()
		if len(r.fail) > 0 {
			d.status, r.fail = r.fail[0], r.fail[1:]
		}
		r.got = append(r.got, d)
		r.mu.Unlock()
		w.WriteHeader(d.status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// waitFor polls until cond holds on the deliveries so far.
func (r *receiver) waitFor(what string, cond func([]delivery) bool) []delivery {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := r.deliveries()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s; deliveries: %d", what, len(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outbox counts the approval notifications not yet delivered or dropped.
func outbox(t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM approval_notification").Scan(&n))
	return n
}

// waitDrained waits until every queued notification was delivered or
// dropped: after that, the receiver has seen everything there was to send.
func waitDrained(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for outbox(t, url) > 0 {
		require.True(t, time.Now().Before(deadline), "the outbox never drained")
		time.Sleep(20 * time.Millisecond)
	}
}

func notifyingServer(w *world, r *receiver, hook ledger.ApprovalWebhook) *harness.Server {
	hook.URL, hook.Secret = r.srv.URL, notifySecret
	if hook.Backoff == 0 {
		hook.Backoff = 50 * time.Millisecond
	}
	hook.Interval = 50 * time.Millisecond
	return w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{ApprovalWebhook: hook}})
}

// TestApprovalNotification: one signed notification per operation that
// starts awaiting approval, with the console link and without the args;
// none for a replayed Prepare or a tool that needs no approval.
func TestApprovalNotification(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	r := newReceiver(t)
	srv := notifyingServer(w, r, ledger.ApprovalWebhook{ConsoleURL: "https://approvals.example.com"})
	c := srv.Client

	req := &opledgerv1.PrepareRequest{Tool: "pay_invoice", Args: payArgs(t, "INV-NOTE-1")}
	first, err := c.Prepare(harness.Ctx(w.agent, "note-1"), req)
	require.NoError(t, err)
	op := first.GetOperation()
	got := r.waitFor("the notification", func(d []delivery) bool { return len(d) >= 1 })
	d := got[0]
	require.Equal(t, http.StatusOK, d.status)
	require.True(t, server.VerifySignature(notifySecret, d.header.Get(ledger.SignatureHeader), d.body, time.Now()),
		"signed like the incoming webhooks: %s", d.header.Get(ledger.SignatureHeader))
	require.False(t, server.VerifySignature("another-secret-0123456789", d.header.Get(ledger.SignatureHeader), d.body, time.Now()))
	require.Equal(t, "application/json", d.header.Get("Content-Type"))
	p := d.payload
	require.Equal(t, op.GetId()+"/1", p.ID)
	require.Equal(t, p.ID, d.header.Get("Idempotency-Key"))
	require.Equal(t, "operation.awaiting_approval", p.Type)
	require.Equal(t, "prepared", p.Reason)
	require.Equal(t, "https://approvals.example.com/operations/"+op.GetId(), p.ConsoleURL)
	require.Contains(t, p.Text, p.ConsoleURL)
	require.Equal(t, op.GetId(), p.Operation.ID)
	require.Equal(t, "acme", p.Operation.Tenant)
	require.Equal(t, "pay_invoice", p.Operation.Tool)
	require.Equal(t, op.GetFingerprint(), p.Operation.Fingerprint)
	require.Equal(t, "15m0s", p.Operation.ApprovalTTL)
	require.Equal(t, op.GetPreparedBy(), p.Operation.PreparedBy)
	require.NotContains(t, string(d.body), "INV-NOTE-1", "no args unless configured")
	require.NotContains(t, string(d.body), `"args"`)

	// A replayed Prepare, and an operation that needs no approval, announce
	// nothing; a second payment does.
	again, err := c.Prepare(harness.Ctx(w.agent, "note-1"), req)
	require.NoError(t, err)
	require.True(t, again.GetReplayed())
	prepare(t, c, w.agent, "send_email", emailArgs(t))
	second := prepare(t, c, w.agent, "pay_invoice", payArgs(t, "INV-NOTE-2"))
	waitDrained(t, w.env.DBURL)
	got = r.deliveries()
	require.Len(t, got, 2)
	require.Equal(t, second.GetId()+"/1", got[1].payload.ID)
}

// TestApprovalNotificationWithArgs: configured to, the payload carries the
// arguments.
func TestApprovalNotificationWithArgs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	r := newReceiver(t)
	srv := notifyingServer(w, r, ledger.ApprovalWebhook{IncludeArgs: true})
	prepare(t, srv.Client, w.agent, "pay_invoice", payArgs(t, "INV-ARGS"))
	d := r.waitFor("the notification", func(d []delivery) bool { return len(d) >= 1 })[0]
	var args map[string]any
	require.NoError(t, json.Unmarshal(d.payload.Operation.Args, &args))
	require.Equal(t, map[string]any{"invoice_id": "INV-ARGS", "amount_minor": float64(4900), "currency": "EUR"}, args)
	require.Empty(t, d.payload.ConsoleURL, "no console configured, no link")
	require.NotContains(t, d.payload.Text, "INV-ARGS", "the chat line never carries args")
}

// TestApprovalNotificationRetries: a receiver that fails first gets the
// same notification again, with backoff, until it acknowledges it.
func TestApprovalNotificationRetries(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	r := newReceiver(t, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusTooManyRequests)
	srv := notifyingServer(w, r, ledger.ApprovalWebhook{Backoff: 100 * time.Millisecond})
	op := prepare(t, srv.Client, w.agent, "pay_invoice", payArgs(t, "INV-RETRY"))
	got := r.waitFor("an acknowledged delivery", func(d []delivery) bool { return len(d) > 0 && d[len(d)-1].status == http.StatusOK })
	require.Len(t, got, 4)
	for i, d := range got {
		require.Equal(t, op.GetId()+"/1", d.payload.ID, "attempt %d", i)
		require.True(t, server.VerifySignature(notifySecret, d.header.Get(ledger.SignatureHeader), d.body, time.Now()))
		if i > 0 {
			// Each retry waited at least its backoff: 100 ms, 200 ms, 400 ms.
			require.GreaterOrEqual(t, d.at.Sub(got[i-1].at), (100*time.Millisecond)<<(i-1), "attempt %d came too early", i)
		}
	}
	waitDrained(t, w.env.DBURL)
	require.Len(t, r.deliveries(), 4)
}

// TestApprovalNotificationDroppedOnceDecided: a notification still failing
// when the operation is decided is dropped, not sent late.
func TestApprovalNotificationDroppedOnceDecided(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{})
	r := newReceiver(t, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503)
	srv := notifyingServer(w, r, ledger.ApprovalWebhook{Backoff: 100 * time.Millisecond})
	op := prepare(t, srv.Client, w.agent, "pay_invoice", payArgs(t, "INV-LATE"))
	r.waitFor("a failed delivery", func(d []delivery) bool { return len(d) >= 1 })
	approve(t, srv.Client, w.approver, op)
	waitDrained(t, w.env.DBURL)
	for _, d := range r.deliveries() {
		require.Equal(t, http.StatusServiceUnavailable, d.status, "nothing was acknowledged after the decision")
	}
}

// TestApprovalNotificationAfterExpiry: an approval that lapses before the
// operation was executed puts it back in front of the approvers.
func TestApprovalNotificationAfterExpiry(t *testing.T) {
	t.Parallel()
	w := newWorld(t, harness.Options{ToolsYAML: harness.ToolsYAML(harness.ToolSpec{Name: "pay_quick", ApprovalTTL: time.Second})})
	r := newReceiver(t)
	srv := notifyingServer(w, r, ledger.ApprovalWebhook{})
	op := prepare(t, srv.Client, w.agent, "pay_quick", payArgs(t, "INV-QUICK"))
	r.waitFor("the first notification", func(d []delivery) bool { return len(d) >= 1 })
	expires := approve(t, srv.Client, w.approver, op).GetOperation().GetApproval().GetExpireTime().AsTime()
	for time.Now().Before(expires.Add(50 * time.Millisecond)) {
		time.Sleep(20 * time.Millisecond) // the approval's own deadline, on this machine's clock
	}
	_, err := execute(srv.Client, w.agent, op.GetId(), 0)
	_, reason := reasonOf(t, err)
	require.Equal(t, "APPROVAL_EXPIRED", reason)
	got := r.waitFor("the second notification", func(d []delivery) bool { return len(d) >= 2 })
	_, evs := get(t, srv.Client, w.agent, op.GetId())
	last := evs[len(evs)-1]
	require.Equal(t, opledgerv1.EventType_EVENT_TYPE_APPROVAL_EXPIRED, last.GetType())
	require.Equal(t, "approval_expired", got[1].payload.Reason)
	require.Equal(t, op.GetId()+"/"+itoa(last.GetSeq()), got[1].payload.ID)
	require.Contains(t, got[1].payload.Text, "again")
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestApprovalNotificationFailureWithUnstorableStatus: a receiver whose
// status line holds what PostgreSQL's text cannot (a NUL character, a byte
// that is not UTF-8) still gets its failure recorded and its retry
// scheduled; the reason phrase is stored with those as U+FFFD.
func TestApprovalNotificationFailureWithUnstorableStatus(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(conn, "HTTP/1.1 503 busy\x00\xff\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}()
		}
	}()
	w := newWorld(t, harness.Options{})
	srv := w.env.StartServer(harness.ServerOptions{Ledger: ledger.Config{ApprovalWebhook: ledger.ApprovalWebhook{
		URL: "http://" + lis.Addr().String(), Secret: notifySecret, Backoff: time.Minute, Interval: 50 * time.Millisecond}}})
	prepare(t, srv.Client, w.agent, "pay_invoice", payArgs(t, "INV-STATUS"))

	lastError, scheduled := failedDelivery(t, w.env.DBURL)
	require.Equal(t, "the receiver answered 503 busy\uFFFD\uFFFD", lastError)
	require.True(t, scheduled, "the retry waits for its backoff")
}

// TestApprovalNotificationAgeOnDatabaseClock: a notification's age is the
// database's clock against the database's created_at. With the database 90 s
// behind this server and a 60 s limit, the server's own clock read every
// fresh notification as too old and dropped it undelivered.
func TestApprovalNotificationAgeOnDatabaseClock(t *testing.T) {
	t.Parallel()
	dbURL, _ := pgtest.NewSkewedDatabase(t, -90*time.Second)
	w := newWorld(t, harness.Options{DatabaseURL: dbURL})
	r := newReceiver(t)
	c := notifyingServer(w, r, ledger.ApprovalWebhook{MaxAge: time.Minute}).Client
	op := prepare(t, c, w.agent, "pay_invoice", payArgs(t, "INV-SKEW-1"))
	got := r.waitFor("the notification", func(d []delivery) bool { return len(d) >= 1 })
	require.Equal(t, op.GetId()+"/1", got[0].payload.ID)
}

// TestApprovalNotificationFailureKeepsTheURLSecret: a receiver's URL may be
// its credential (a chat's incoming webhook). A failed delivery records and
// logs why without it, as the HTTP executor's errors do.
func TestApprovalNotificationFailureKeepsTheURLSecret(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close()) // nobody listens: every delivery is refused
	const token = "XyZsEcReTtOkEn0123456789"
	w := newWorld(t, harness.Options{})
	var logs lockedLog
	srv := w.env.StartServer(harness.ServerOptions{Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Ledger: ledger.Config{ApprovalWebhook: ledger.ApprovalWebhook{
			URL: "http://" + addr + "/services/T000/B000/" + token, Secret: notifySecret, Backoff: time.Minute, Interval: 50 * time.Millisecond}}})
	prepare(t, srv.Client, w.agent, "pay_invoice", payArgs(t, "INV-URL"))

	lastError, _ := failedDelivery(t, w.env.DBURL)
	require.NotContains(t, lastError, token)
	require.Contains(t, lastError, "refused")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "delivery failed") }, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, logs.String(), token)
}

// failedDelivery waits until the one queued notification records a failed
// delivery, and returns why and whether its retry waits 30 s or more.
func failedDelivery(t *testing.T, dbURL string) (lastError string, scheduled bool) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	deadline := time.Now().Add(20 * time.Second)
	for {
		var last *string
		require.NoError(t, conn.QueryRow(t.Context(),
			"SELECT last_error, next_attempt_at > now() + interval '30 seconds' FROM approval_notification").Scan(&last, &scheduled))
		if last != nil {
			return *last, scheduled
		}
		require.True(t, time.Now().Before(deadline), "the failed delivery was never recorded")
		time.Sleep(20 * time.Millisecond)
	}
}

// lockedLog is a log destination safe for the server's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
