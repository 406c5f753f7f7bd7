package fakepay

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Webhook makes the processor announce every committed charge
// asynchronously, as a payment processor's webhook would: POST URL with a
// JSON event and an `Opledger-Signature: t=<unix>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">` header. Delivery is at least once: Duplicates extra copies
// of each event are sent, as real webhook senders sometimes do.
type Webhook struct {
	URL        string
	Secret     string
	Duplicates int
}

// WebhookEvent is what the processor sends.
type WebhookEvent struct {
	ID             string          `json:"id"`
	Type           string          `json:"type"`
	IdempotencyKey string          `json:"idempotency_key"`
	ExternalRef    string          `json:"external_ref"`
	Data           json.RawMessage `json:"data"`
}

// SetWebhook turns webhooks on (or off with a zero Webhook).
func (s *Server) SetWebhook(w Webhook) {
	s.mu.Lock()
	s.webhook = w
	s.mu.Unlock()
}

// SignWebhook returns the Opledger-Signature header value for body at t.
func SignWebhook(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// announce delivers the event for a committed charge in the background.
func (s *Server) announce(w Webhook, c Charge, body []byte) {
	if w.URL == "" {
		return
	}
	ev, _ := json.Marshal(WebhookEvent{ID: "evt_" + c.ID, Type: "succeeded", IdempotencyKey: c.IdempotencyKey, ExternalRef: c.ID, Data: body})
	go func() {
		client := &http.Client{Timeout: 5 * time.Second}
		for i := 0; i <= w.Duplicates; i++ {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, w.URL, bytes.NewReader(ev))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Opledger-Signature", SignWebhook(w.Secret, s.now(), ev))
			resp, err := client.Do(req)
			if err != nil {
				s.log.Warn("fakepay: webhook delivery failed", "error", err)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode >= 300 {
				s.log.Warn("fakepay: webhook refused", "status", fmt.Sprint(resp.StatusCode))
			}
		}
	}()
}
