package ledger

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/store"
)

// ApprovalWebhook configures the approval notification: a signed HTTP POST
// sent when an operation starts awaiting approval (prepared, or back after
// its approval expired), so that a team can route it to chat.
type ApprovalWebhook struct {
	// URL receives the notifications; empty turns them off.
	URL string
	// Secret signs each delivery like the incoming webhooks:
	// Opledger-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>.
	Secret string
	// IncludeArgs adds the operation's arguments to the payload; off by
	// default, since arguments may be personal or confidential and chat
	// tools keep what they receive.
	IncludeArgs bool
	// ConsoleURL is the approval console's base URL; the payload links to
	// ConsoleURL/operations/<id>.
	ConsoleURL string
	// Timeout bounds one delivery (default 10s).
	Timeout time.Duration
	// Backoff is the delay after the first failed delivery, doubled after
	// each further one up to MaxBackoff (defaults 1s and 5m).
	Backoff, MaxBackoff time.Duration
	// MaxAge is how long a notification is retried before it is dropped
	// (default 24h); one whose operation no longer awaits approval is
	// dropped at once.
	MaxAge time.Duration
	// Interval is how often each replica looks for due notifications
	// (default 1s); a Prepare in this process wakes it at once.
	Interval time.Duration
}

// SignatureHeader carries the signature of a notification, in the format
// of the incoming webhooks.
const SignatureHeader = "Opledger-Signature"

// Sign returns the Opledger-Signature value for body at time t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Notification is the JSON body of an approval notification.
type Notification struct {
	// ID names the notification: "<operation id>/<event seq>". Every
	// retry of one notification carries the same ID (and Idempotency-Key
	// header); a receiver dedupes on it.
	ID string `json:"id"`
	// Type is "operation.awaiting_approval".
	Type string `json:"type"`
	// Reason is "prepared" or "approval_expired".
	Reason string `json:"reason"`
	// Text is a one-line summary for a chat message (never the args).
	Text string `json:"text"`
	// ConsoleURL opens the operation in the approval console.
	ConsoleURL string                `json:"console_url,omitempty"`
	Operation  NotificationOperation `json:"operation"`
}

// NotificationOperation is the operation a notification is about.
type NotificationOperation struct {
	ID          string    `json:"id"`
	Tenant      string    `json:"tenant"`
	Tool        string    `json:"tool"`
	ToolVersion string    `json:"tool_version"`
	Fingerprint string    `json:"fingerprint"`
	PreparedBy  string    `json:"prepared_by"`
	CreateTime  time.Time `json:"create_time"`
	// ApprovalTTL is how long an approval will last (a Go duration).
	ApprovalTTL string `json:"approval_ttl"`
	// Args only when the server is configured to send them.
	Args json.RawMessage `json:"args,omitempty"`
}

// notifyOn reports whether new waits for approval queue notifications.
func (l *Ledger) notifyOn() bool { return l.cfg.ApprovalWebhook.URL != "" }

// SetApprovalConsoleURL sets the console address that approval
// notifications link to, once the console listens (on a port the system may
// have chosen). Call it before RunNotifier.
func (l *Ledger) SetApprovalConsoleURL(u string) { l.cfg.ApprovalWebhook.ConsoleURL = u }

// kickNotifier wakes this process's dispatcher without blocking.
func (l *Ledger) kickNotifier() {
	select {
	case l.notifyKick <- struct{}{}:
	default:
	}
}

// RunNotifier delivers approval notifications until ctx ends, when they are
// configured. Every replica may run it: each claims due rows with SKIP
// LOCKED. Delivery is at least once.
func (l *Ledger) RunNotifier(ctx context.Context) {
	if !l.notifyOn() {
		return
	}
	w := l.cfg.ApprovalWebhook
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		n, err := l.NotifyBatch(ctx)
		if err != nil && ctx.Err() == nil {
			l.logger.Warn("notifier: failed", "error", err)
		}
		if n == notifyBatchSize {
			continue // more may be due
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.notifyKick:
		}
	}
}

const notifyBatchSize = 16

// NotifyBatch claims the notifications due now and delivers them
// concurrently; it returns how many it claimed.
func (l *Ledger) NotifyBatch(ctx context.Context) (int, error) {
	w := l.cfg.ApprovalWebhook
	// The lease covers a delivery (which the timeout bounds) and the
	// bookkeeping after it; past it another replica may send again.
	due, err := l.store.ApprovalNotificationClaim(ctx, notifyBatchSize, w.Timeout+5*time.Second)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, n := range due {
		wg.Go(func() { l.notifyOne(ctx, n) })
	}
	wg.Wait()
	return len(due), nil
}

func (l *Ledger) notifyOne(ctx context.Context, n store.Notification) {
	w := l.cfg.ApprovalWebhook
	log := l.logger.With("operation_id", n.OperationID, "tenant", n.Tenant, "notification", n.OperationID+"/"+strconv.Itoa(int(n.Seq)), "attempt", n.Attempts)
	drop := func(why string) {
		if err := l.store.ApprovalNotificationDelete(ctx, n.OperationID, n.Seq); err != nil {
			log.Warn("notifier: could not drop a notification", "error", err)
			return
		}
		log.Info("notifier: dropped", "why", why)
	}
	if State(n.State) != StateAwaitingApproval {
		drop("the operation no longer awaits approval (" + n.State + ")")
		return
	}
	if n.DBNow.Sub(n.CreatedAt) > w.MaxAge { // the database's clock, as every time rule
		drop("undelivered for longer than " + w.MaxAge.String())
		return
	}
	op, err := l.store.OperationGet(ctx, n.Tenant, n.OperationID)
	if err != nil {
		log.Warn("notifier: could not read the operation", "error", err)
		return // the lease ends and it is tried again
	}
	if State(op.State) != StateAwaitingApproval || op.Events != n.Seq {
		// AWAITING_APPROVAL has no edge back to itself: while the wait this
		// notification announces lasts, the event that began it is the
		// operation's last. A later one (a decision, and maybe a new wait
		// with a notification of its own) ended it.
		drop(fmt.Sprintf("the wait it announces has ended (%s, event %d)", op.State, op.Events))
		return
	}
	body, err := l.notificationBody(n, op)
	if err != nil {
		log.Error("notifier: could not encode", "error", err)
		return
	}
	if err := l.deliver(ctx, n, body); err != nil {
		delay := notifyBackoff(w.Backoff, w.MaxBackoff, int(n.Attempts))
		if err := l.store.ApprovalNotificationRetry(ctx, n, delay, executor.BoundText(err.Error())); err != nil {
			log.Warn("notifier: could not schedule the retry", "error", err)
		}
		log.Warn("notifier: delivery failed; will retry", "error", err, "retry_in", delay.String())
		return
	}
	if err := l.store.ApprovalNotificationDelete(ctx, n.OperationID, n.Seq); err != nil {
		// Delivered but not forgotten: it will be delivered again once
		// the lease ends, with the same id.
		log.Warn("notifier: delivered, but could not record it", "error", err)
		return
	}
	log.Info("notifier: delivered")
}

// notifyBackoff is the delay after the attempts-th failed delivery: base ×
// 2^(attempts-1), capped, with up to 20% jitter so replicas spread out.
func notifyBackoff(base, maxDelay time.Duration, attempts int) time.Duration {
	d := base
	for i := 1; i < attempts && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

func (l *Ledger) notificationBody(n store.Notification, op Operation) ([]byte, error) {
	w := l.cfg.ApprovalWebhook
	p := Notification{
		ID: n.OperationID + "/" + strconv.Itoa(int(n.Seq)), Type: "operation.awaiting_approval", Reason: n.Reason,
		Operation: NotificationOperation{ID: op.ID, Tenant: op.Tenant, Tool: op.Tool, ToolVersion: op.ToolVersion,
			Fingerprint: op.Fingerprint, PreparedBy: op.PreparedBy, CreateTime: op.CreatedAt.UTC(), ApprovalTTL: op.ApprovalTTL.String()},
	}
	what := "awaits approval"
	if n.Reason == "approval_expired" {
		what = "awaits approval again (the approval expired before it was executed)"
	}
	p.Text = fmt.Sprintf("%s %s in tenant %s %s", op.Tool, op.ID, op.Tenant, what)
	if w.ConsoleURL != "" {
		p.ConsoleURL = w.ConsoleURL + "/operations/" + op.ID
		p.Text += ": " + p.ConsoleURL
	}
	if w.IncludeArgs {
		p.Operation.Args = json.RawMessage(op.Args)
	}
	return json.Marshal(p)
}

// deliver POSTs one notification; any 2xx is an acknowledgement.
func (l *Ledger) deliver(ctx context.Context, n store.Notification, body []byte) error {
	w := l.cfg.ApprovalWebhook
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("the receiver's URL is not usable") // its text may hold a credential
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "opledger-notifier")
	req.Header.Set("Idempotency-Key", n.OperationID+"/"+strconv.Itoa(int(n.Seq)))
	if w.Secret != "" {
		req.Header.Set(SignatureHeader, Sign(w.Secret, time.Now(), body))
	}
	resp, err := l.notifyClient.Do(req)
	if err != nil {
		// net/http names the URL, which may be the receiver's credential (a
		// chat's incoming webhook): the reason only, as the executor does.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("%s to the receiver: %w", ue.Op, ue.Err)
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}
