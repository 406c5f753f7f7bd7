package chaos

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// The event types of a history.
const (
	// EventInvoke: a client starts a call.
	EventInvoke = "invoke"
	// EventOK: the call answered; State/Ref are what the client was told.
	EventOK = "ok"
	// EventFail: the call failed (Code, Reason) or the client abandoned it
	// (Code "Canceled", Detail "lost": the response was thrown away).
	EventFail = "fail"
	// EventNemesis: a fault started or ended, or a server crashed at a
	// failpoint.
	EventNemesis = "nemesis"
	// EventInfo: a phase of the run.
	EventInfo = "info"
	// EventViolation: the checker found a violation.
	EventViolation = "violation"
	// EventFinal: the final state of one operation as the checker read it.
	EventFinal = "final"
	// EventSummary: the summary line.
	EventSummary = "summary"
	// EventSend: a request a processor received (Process is the processor,
	// Server the sender, Code the status answered, Detail the answer),
	// recorded after the run at the time it arrived.
	EventSend = "send"
)

// Event is one line of the JSON-lines history: every client invocation and
// completion, every nemesis action and the checker's findings, so that a
// failing run can be replayed and debugged. Idempotency keys appear only as
// digests.
type Event struct {
	Seq  int64     `json:"seq"`
	Time time.Time `json:"t"`
	Type string    `json:"type"`
	// Process is the actor: "w3" (worker 3), "nemesis", "s2" (server 2),
	// "settle" or "checker".
	Process string `json:"process,omitempty"`
	// Call links an invocation with its completion.
	Call int64 `json:"call,omitempty"`
	// F is the function: prepare, approve, deny, execute, get, reconcile,
	// or a nemesis action (kill, stop, pg-crash, net-db-reset, …).
	F string `json:"f,omitempty"`
	// Server is the 1-based server a call went to or a fault hit.
	Server int    `json:"server,omitempty"`
	Tool   string `json:"tool,omitempty"`
	// Key is a digest of the idempotency key (KeyDigest).
	Key      string `json:"key,omitempty"`
	Op       string `json:"op,omitempty"`
	State    string `json:"state,omitempty"`
	Ref      string `json:"ref,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	Code     string `json:"code,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Detail   string `json:"detail,omitempty"`
	// Events is a final operation's event log (database clock).
	Events []OpEvent `json:"events,omitempty"`
}

// KeyDigest is the digest under which an idempotency key appears in the
// history: the first 16 hex digits of its SHA-256.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// History records events as JSON lines and keeps in memory the ones the
// checker needs (completed calls that name an operation).
type History struct {
	mu   sync.Mutex
	w    *bufio.Writer
	seq  int64
	call int64
	keep []Event
	// internal are the calls the ledger answered INTERNAL.
	internal []Event
	// released are the operations (by id, or key when the call named no
	// id) an Execute found released with nothing sent; lapsed counts the
	// APPROVAL_EXPIRED answers on them: the approval lapsed after a release.
	released map[string]bool
	lapsed   int
	err      error
}

// NewHistory writes to w (io.Discard for none).
func NewHistory(w io.Writer) *History {
	return &History{w: bufio.NewWriterSize(w, 256<<10)}
}

// NextCall returns a fresh call id.
func (h *History) NextCall() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.call++
	return h.call
}

// Record stamps e with a sequence number and the time (unless set) and
// writes it.
func (h *History) Record(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	e.Seq = h.seq
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if e.Type == EventOK && e.Op != "" {
		h.keep = append(h.keep, e)
	}
	if e.Type == EventFail && e.Reason == "INTERNAL" {
		h.internal = append(h.internal, e)
	}
	if e.Type == EventFail && e.Reason != "" {
		id := e.Op
		if id == "" {
			id = e.Tool + "/" + e.Key
		}
		switch e.Reason {
		case "DOWNSTREAM_UNAVAILABLE":
			if h.released == nil {
				h.released = map[string]bool{}
			}
			h.released[id] = true
		case "APPROVAL_EXPIRED":
			if h.released[id] {
				h.lapsed++
			}
		}
	}
	b, err := json.Marshal(e)
	if err == nil {
		b = append(b, '\n')
		_, err = h.w.Write(b)
	}
	if err != nil && h.err == nil {
		h.err = err
	}
}

// Observations returns the completed calls that named an operation, in the
// order they completed.
func (h *History) Observations() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.keep...)
}

// Internal returns the calls the ledger answered with reason INTERNAL (an
// error it did not expect), in the order they completed.
func (h *History) Internal() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.internal...)
}

// LapsedAfterRelease counts the calls answered APPROVAL_EXPIRED for an
// operation an earlier call found released (DOWNSTREAM_UNAVAILABLE), so far:
// what the checker's Lapsed counts from the event logs, as the clients see it.
func (h *History) LapsedAfterRelease() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lapsed
}

// Flush writes buffered lines out and reports the first write error.
func (h *History) Flush() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.w.Flush(); err != nil && h.err == nil {
		h.err = err
	}
	return h.err
}
