// Package audit checks opledger's receipts: the hash chain every
// operation's events form (migration 0017 writes it, in the statement that
// writes each event) and the operation's decisive fields against the events
// that set them. It holds no database code: the store reads the rows, an
// export file carries them, and the same checks run on either
// (docs/audit.md).
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/opledger/opledger/clients/go/fingerprint"
)

// Operation is what the checks read of an operation: its decisive fields,
// its counters and the head of its chain.
type Operation struct {
	ID            string          `json:"id"`
	Tenant        string          `json:"tenant"`
	Tool          string          `json:"tool"`
	ToolVersion   string          `json:"tool_version"`
	Args          json.RawMessage `json:"args"`
	Fingerprint   string          `json:"fingerprint"`
	State         string          `json:"state"`
	DownstreamKey string          `json:"downstream_key"`
	ExternalRef   string          `json:"external_ref,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	Error         json.RawMessage `json:"error,omitempty"`
	PolicyDigest  string          `json:"policy_digest"`
	// ApprovalsNeeded and Approvals (a JSON array of {principal_id,
	// decision, fingerprint, ...}) are the quorum and the current round.
	ApprovalsNeeded int32           `json:"approvals_needed"`
	Approvals       json.RawMessage `json:"approvals"`
	Attempts        int32           `json:"attempts"`
	Fence           int64           `json:"fence"`
	// Events is the number of events the operation has written.
	Events int32 `json:"events"`
	// ChainHead is the hash of its last event (nil before its chain began).
	ChainHead HexBytes  `json:"chain_head"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Event is one event of an operation's log, as the chain hashes it.
type Event struct {
	OperationID string `json:"operation_id"`
	Seq         int32  `json:"seq"`
	Type        string `json:"type"`
	Actor       string `json:"actor"`
	// FromState is "" for the first event (stored NULL).
	FromState string    `json:"from_state,omitempty"`
	ToState   string    `json:"to_state"`
	Attempt   int32     `json:"attempt"`
	Fence     int64     `json:"fence"`
	Detail    string    `json:"detail"`
	CreatedAt time.Time `json:"created_at"`
	// Hash is nil for an event written before the chains began.
	Hash HexBytes `json:"hash"`
	// Facts are the decisive fields the event set; a nil value is a JSON
	// null (the field kept).
	Facts map[string]*string `json:"facts,omitempty"`
}

// HexBytes is a hash, in JSON as lowercase hex (null when nil).
type HexBytes []byte

// MarshalJSON writes the hex form.
func (h HexBytes) MarshalJSON() ([]byte, error) {
	if h == nil {
		return []byte("null"), nil
	}
	return json.Marshal(hex.EncodeToString(h))
}

// UnmarshalJSON reads the hex form.
func (h *HexBytes) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*h = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	d, err := hex.DecodeString(s)
	if err != nil {
		return fmt.Errorf("audit: hash %q is not hex: %w", s, err)
	}
	*h = d
	return nil
}

// String is the hex form.
func (h HexBytes) String() string { return hex.EncodeToString(h) }

// EventDoc is the canonical JSON of what the writer of e knows before the
// statement that writes it runs: the RFC 8785 form of {actor, detail,
// facts, op, to, type, v: 2}, facts an object of strings (or nulls). The
// store builds it in Go and passes its SHA-256 (DocHash) to that
// statement, which adds the rest in SQL (EventHash): building the whole
// document in SQL cost PostgreSQL tens of microseconds per event
// (docs/performance.md).
func EventDoc(e Event) ([]byte, error) {
	return appendDoc(make([]byte, 0, 512), e)
}

// DocHash is the SHA-256 of EventDoc(e).
func DocHash(e Event) ([]byte, error) { return docHash(e) }

// FactsText is the JCS text of facts as an event stores it (and hashes it,
// in EventDoc); "" when there are none (stored NULL, hashed as {}).
func FactsText(facts map[string]*string) (string, error) {
	if len(facts) == 0 {
		return "", nil
	}
	b, err := appendFacts(make([]byte, 0, 512), facts)
	return string(b), err
}

// zeroPrev stands for the hash before a chain's first event.
var zeroPrev [sha256.Size]byte

// EventHash is e's hash chained to prev (the hash of the event before it,
// nil for the first of a chain): the SHA-256 of prev (32 zero bytes when
// nil), DocHash(e), then seq, attempt and fence as big-endian 4-, 4- and
// 8-byte integers, the event's time as a big-endian 8-byte count of
// microseconds since the Unix epoch (the database's precision) and the
// from state's UTF-8 bytes, byte for byte what migration 0017's audit_link
// computes in the statement that writes the event.
func EventHash(prev []byte, e Event) ([]byte, error) {
	doc, err := DocHash(e)
	if err != nil {
		return nil, err
	}
	return Link(prev, doc, e), nil
}

// Link is EventHash with e's doc hash given.
func Link(prev, doc []byte, e Event) []byte {
	h := sha256.New()
	if prev == nil {
		prev = zeroPrev[:]
	}
	h.Write(prev)
	h.Write(doc)
	var b [24]byte
	binary.BigEndian.PutUint32(b[0:], uint32(e.Seq))
	binary.BigEndian.PutUint32(b[4:], uint32(e.Attempt))
	binary.BigEndian.PutUint64(b[8:], uint64(e.Fence))
	binary.BigEndian.PutUint64(b[16:], uint64(e.CreatedAt.UnixMicro()))
	h.Write(b[:])
	h.Write([]byte(e.FromState))
	return h.Sum(nil)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Digest is the lowercase hex SHA-256 of the RFC 8785 form of a JSON
// document: what the events record of an operation's arguments and
// result. nil (SQL NULL) digests to "". Most texts take canonicalJSON's
// fast path, the rest fingerprint.Canonicalize.
func Digest(doc []byte) (string, error) {
	if doc == nil {
		return "", nil
	}
	bp := canonBufs.Get().(*[]byte)
	c, ok := canonicalJSON((*bp)[:0], doc)
	if ok {
		if cap(c) <= 64<<10 {
			*bp = c[:0]
		}
	} else {
		var err error
		if c, err = fingerprint.Canonicalize(json.RawMessage(doc)); err != nil {
			canonBufs.Put(bp)
			return "", fmt.Errorf("audit: digest: %w", err)
		}
	}
	sum := sha256.Sum256(c)
	canonBufs.Put(bp)
	return hex.EncodeToString(sum[:]), nil
}

// Check names one family of checks, so that a test (or an auditor) can
// switch one off and see what it alone catches.
type Check string

const (
	// CheckChain recomputes every event's hash from its fields and the
	// hash before it.
	CheckChain Check = "chain"
	// CheckSequence holds the events to seq 1..n, n the operation's event
	// count, and the operation's chain head to the last event's hash.
	CheckSequence Check = "sequence"
	// CheckFields holds the operation's decisive fields (arguments,
	// fingerprint, state, approvals, external reference, result, policy) to
	// the events that set them.
	CheckFields Check = "fields"
)

// Break is one thing that does not hold: the operation and, when one is to
// blame, the event.
type Break struct {
	OperationID string `json:"operation_id"`
	// Seq is the event's seq, 0 when the break is the operation's.
	Seq     int32  `json:"seq,omitempty"`
	Check   Check  `json:"check"`
	Problem string `json:"problem"`
}

func (b Break) String() string {
	if b.OperationID == "" {
		return fmt.Sprintf("export: %s (%s)", b.Problem, b.Check)
	}
	if b.Seq > 0 {
		return fmt.Sprintf("operation %s event %d: %s (%s)", b.OperationID, b.Seq, b.Problem, b.Check)
	}
	return fmt.Sprintf("operation %s: %s (%s)", b.OperationID, b.Problem, b.Check)
}

// Off is a set of checks switched off (nil: all on).
type Off map[Check]bool

// VerifyOperation checks op's events (in seq order, as stored) against
// each other and against op, and returns every break. Events written
// before the chains began (no hash) may only precede the hashed ones;
// what they set is not checked.
func VerifyOperation(op Operation, events []Event, off Off) []Break {
	var out []Break
	add := func(c Check, seq int32, format string, args ...any) {
		if !off[c] {
			out = append(out, Break{OperationID: op.ID, Seq: seq, Check: c, Problem: fmt.Sprintf(format, args...)})
		}
	}
	// Sequence: 1..n, and the head is the last hash.
	for i, e := range events {
		if e.OperationID != op.ID {
			add(CheckSequence, e.Seq, "event belongs to operation %s", e.OperationID)
		}
		if e.Seq != int32(i+1) {
			add(CheckSequence, e.Seq, "event at position %d has seq %d", i+1, e.Seq)
		}
	}
	if int(op.Events) != len(events) {
		add(CheckSequence, 0, "the operation counts %d events, %d are stored", op.Events, len(events))
	}
	var last []byte
	if n := len(events); n > 0 {
		last = events[n-1].Hash
	}
	if !bytes.Equal(op.ChainHead, last) {
		add(CheckSequence, 0, "the operation's chain head %x is not its last event's hash %x", []byte(op.ChainHead), last)
	}

	// Chain: every hashed event, from the hash before it.
	var prev []byte
	first := -1 // the first hashed event
	for i, e := range events {
		if e.Hash == nil {
			if first >= 0 {
				add(CheckChain, e.Seq, "event without a hash after the chain began")
			}
			continue
		}
		if first < 0 {
			first = i
		}
		h, err := EventHash(prev, e)
		if err != nil {
			add(CheckChain, e.Seq, "event cannot be put in canonical form: %v", err)
		} else if !bytes.Equal(h, e.Hash) {
			add(CheckChain, e.Seq, "hash %x does not match the event's fields and the hash before it (%x)", []byte(e.Hash), h)
		}
		prev = e.Hash
	}
	if first < 0 {
		return out
	}
	out = append(out, verifyFields(op, events[first:], first == 0, off)...)
	return out
}

// verifyFields holds op's decisive fields to the hashed events (chain),
// which are all of them when complete.
func verifyFields(op Operation, chain []Event, complete bool, off Off) []Break {
	if off[CheckFields] {
		return nil
	}
	var out []Break
	add := func(seq int32, format string, args ...any) {
		out = append(out, Break{OperationID: op.ID, Seq: seq, Check: CheckFields, Problem: fmt.Sprintf(format, args...)})
	}
	last := chain[len(chain)-1]
	if op.State != last.ToState {
		add(last.Seq, "the operation's state %s is not %s, where its last event left it", op.State, last.ToState)
	}
	if op.Fence != last.Fence || op.Attempts != last.Attempt {
		add(last.Seq, "the operation's fence/attempts %d/%d are not its last event's %d/%d", op.Fence, op.Attempts, last.Fence, last.Attempt)
	}
	// The last value each fact was set to, and the event that set it.
	type set struct {
		v   string
		seq int32
	}
	// A NULL fact keeps the value before it. approvals_demanded (a policy
	// applied again) raises approvals_needed to it, never lowers it: the
	// quorum only grows (OperationPolicyApply).
	facts := map[string]set{}
	for _, e := range chain {
		for k, v := range e.Facts {
			if v == nil {
				continue
			}
			if k == "approvals_demanded" {
				cur, ok := facts["approvals_needed"]
				d, err1 := strconv.Atoi(*v)
				c, err2 := strconv.Atoi(cur.v)
				if !ok || err1 != nil || err2 != nil || d > c {
					facts["approvals_needed"] = set{*v, e.Seq}
				}
				continue
			}
			facts[k] = set{*v, e.Seq}
		}
	}
	expect := func(name, got string) {
		f, ok := facts[name]
		switch {
		case ok && f.v != got:
			add(f.seq, "the operation's %s %q is not %q, as this event set it", name, got, f.v)
		case !ok && complete && got != "":
			add(0, "the operation's %s %q was set by no event", name, got)
		}
	}
	if complete {
		argsDigest, err := Digest(op.Args)
		if err != nil {
			add(0, "the operation's args: %v", err)
		}
		p := chain[0]
		for name, got := range map[string]string{
			"args_digest": argsDigest, "fingerprint": op.Fingerprint, "tenant": op.Tenant, "tool": op.Tool,
			"tool_version": op.ToolVersion, "downstream_key": op.DownstreamKey,
		} {
			if v := p.Facts[name]; v == nil || *v != got {
				add(p.Seq, "the operation's %s %q is not what its first event recorded", name, got)
			}
		}
	}
	expect("external_ref", op.ExternalRef)
	resultDigest, err := Digest(op.Result)
	if err != nil {
		add(0, "the operation's result: %v", err)
	}
	expect("result_digest", resultDigest)
	errorDigest, err := Digest(op.Error)
	if err != nil {
		add(0, "the operation's error: %v", err)
	}
	expect("error_digest", errorDigest)
	expect("policy_digest", op.PolicyDigest)
	expect("approvals_needed", fmt.Sprint(op.ApprovalsNeeded))

	// Every approval the operation counts was given by an event.
	var approvals []struct {
		PrincipalID string `json:"principal_id"`
		Decision    string `json:"decision"`
		Fingerprint string `json:"fingerprint"`
	}
	if len(op.Approvals) > 0 {
		if err := json.Unmarshal(op.Approvals, &approvals); err != nil {
			add(0, "the operation's approvals are not a list: %v", err)
		}
	}
	for _, a := range approvals {
		found := !complete
		for _, e := range chain {
			if val(e.Facts["approver"]) == a.PrincipalID && a.PrincipalID != "" &&
				(val(e.Facts["decision"]) == a.Decision || e.Type == "PREPARED" && a.Decision == "APPROVE") &&
				(val(e.Facts["approved_fingerprint"]) == a.Fingerprint || e.Type == "PREPARED" && val(e.Facts["fingerprint"]) == a.Fingerprint) {
				found = true
				break
			}
		}
		if !found {
			add(0, "the operation counts a %s by %s of %s that no event records", a.Decision, a.PrincipalID, a.Fingerprint)
		}
	}
	return out
}

func val(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
