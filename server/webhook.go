package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/ledger"
	"github.com/opledger/opledger/tool"
)

// SignatureHeader carries a webhook's signature:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
const SignatureHeader = "Opledger-Signature"

// signatureTolerance bounds how old a signed timestamp may be, so a
// captured delivery cannot be replayed much later (and a replay within it is
// a duplicate event anyway).
const signatureTolerance = 5 * time.Minute

// WebhookHandler serves POST /webhooks/{tool}: a downstream's signed,
// asynchronous report of an operation's outcome. Only tools that declare a
// webhook_secret accept events.
func WebhookHandler(l *ledger.Ledger, logger *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{tool}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("tool")
		// Each version of the tool declares its own executor, secret
		// included: the event is the signer's versions' to apply.
		var secrets []*tool.Tool
		for _, t := range l.Tools() {
			if t.Name == name && t.Executor.WebhookSecret != "" {
				secrets = append(secrets, t)
			}
		}
		if len(secrets) == 0 {
			http.Error(w, "no webhooks for this tool", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		var signedAt time.Time
		var versions []string
		for _, t := range secrets {
			if at, ok := signatureTime(t.Executor.WebhookSecret, r.Header.Get(SignatureHeader), body); ok {
				signedAt, versions = at, append(versions, t.Version)
			}
		}
		if len(versions) == 0 {
			logger.Warn("webhook: bad signature", "tool", name)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// The signature's age on the database's clock, as every time rule.
		now, err := l.DatabaseNow(r.Context())
		if err != nil {
			logger.Error("webhook: could not read the database's clock", "tool", name, "error", err)
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		if !fresh(signedAt, now) {
			logger.Warn("webhook: stale signature", "tool", name, "signed_at", signedAt.UTC().Format(time.RFC3339))
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var ev ledger.WebhookEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "body is not a webhook event", http.StatusBadRequest)
			return
		}
		result, err := l.WebhookSigned(r.Context(), name, versions, ev)
		switch {
		case errors.Is(err, ledger.ErrWebhookUnsigned):
			logger.Warn("webhook: signed for another version of the tool", "tool", name, "event", ev.ID)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		case errors.Is(err, ledger.ErrWebhookInvalid):
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		case err != nil:
			logger.Error("webhook: could not apply", "tool", name, "event", ev.ID, "error", err)
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		if result.Contradicts {
			// The ledger's recorded truth and the downstream's disagree
			// about a finished operation: an operator must look.
			logger.Error("webhook: the downstream contradicts the ledger", "tool", name, "event", ev.ID,
				"operation", result.Operation, "result", result.Text)
		} else {
			logger.Info("webhook applied", "tool", name, "event", ev.ID, "operation", result.Operation, "result", result.Text)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"result": result.Text})
	})
	return mux
}

// VerifySignature reports whether header is a valid Opledger-Signature of
// body under secret, signed within 5 minutes of now. It is the check this
// server makes on incoming webhooks, and the one a receiver of opledger's
// approval notifications makes (docs/operations.md).
func VerifySignature(secret, header string, body []byte, now time.Time) bool {
	signedAt, ok := signatureTime(secret, header, body)
	return ok && fresh(signedAt, now)
}

// fresh reports whether a signature made at signedAt is within
// signatureTolerance of now, either way.
func fresh(signedAt, now time.Time) bool {
	d := now.Sub(signedAt)
	return d <= signatureTolerance && d >= -signatureTolerance
}

// signatureTime returns the time header's signature of body under secret
// was made at, and whether the signature is valid (its age aside).
func signatureTime(secret, header string, body []byte) (time.Time, bool) {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return time.Time{}, false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return time.Unix(sec, 0), hmac.Equal(got, m.Sum(nil))
}
