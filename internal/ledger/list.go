package ledger

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"time"

	opledgerv1 "github.com/opledger/opledger/gen/go/opledger/v1"
	"github.com/opledger/opledger/store"
	"github.com/opledger/opledger/tool"
)

// Page sizes of ListOperations (AIP-158): a request without one gets
// DefaultPageSize; a larger one than MaxPageSize is read as MaxPageSize.
const (
	DefaultPageSize = 50
	MaxPageSize     = 200
)

// ListInput selects a page of the actor's tenant's operations.
type ListInput struct {
	// States keeps operations in these states; empty means all.
	States []State
	// Tool keeps one tool's operations; empty means all.
	Tool string
	// ApprovedUnsent keeps only operations that needed an approval and
	// have sent nothing yet (the console's approvals waiting to be
	// executed); not offered by the RPC.
	ApprovedUnsent bool
	// PageSize is the most operations returned; 0 means DefaultPageSize.
	PageSize int
	// PageToken is the previous page's NextPageToken, or empty.
	PageToken string
}

// Tools returns every configured tool version, sorted by name and version.
func (l *Ledger) Tools() []*tool.Tool { return l.tools.List() }

// IsCurrent reports whether t is the version a Prepare without a version
// gets.
func (l *Ledger) IsCurrent(t *tool.Tool) bool {
	cur, err := l.tools.Lookup(t.Name, "")
	return err == nil && cur == t
}

// ListOperations returns a page of the actor's tenant's operations, newest
// first, and the token of the next page ("" after the last one). The token
// carries the last operation's position and a MAC over it, the tenant and
// the filters, so a token that was altered, comes from another tenant or
// is replayed with other filters is refused instead of listing something
// the caller did not ask for.
func (l *Ledger) ListOperations(ctx context.Context, a Actor, in ListInput) ([]Operation, string, error) {
	states := normalizeStates(in.States)
	size := in.PageSize
	switch {
	case size < 0:
		return nil, "", &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: "page_size", Message: "page_size must not be negative"}
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	q := store.ListQuery{Tenant: a.Tenant, Tool: in.Tool, ApprovedUnsent: in.ApprovedUnsent, Limit: int32(size + 1)}
	for _, s := range states {
		q.States = append(q.States, string(s))
	}
	if in.PageToken != "" {
		at, id, ok := l.openPageToken(in.PageToken, a.Tenant, states, in)
		if !ok {
			return nil, "", &Error{Reason: opledgerv1.ErrorReason_ERROR_REASON_FIELD_INVALID, Field: "page_token",
				Message: "page_token was not issued for this tenant and these states and tool (or was altered); start again without one"}
		}
		q.AfterTime, q.AfterID = at, id
	}
	ops, err := l.store.OperationList(ctx, q)
	if err != nil {
		return nil, "", storeErr(err)
	}
	next := ""
	if len(ops) > size {
		ops = ops[:size]
		next = l.PageTokenAfter(a, in, ops[size-1])
	}
	return ops, next, nil
}

// PageTokenAfter is the token of the page that follows op in the listing in
// selects, for a caller that answers fewer of a page's operations than
// ListOperations returned (the server, when they would not fit in one
// message): the next page then starts after the last one it answered.
func (l *Ledger) PageTokenAfter(a Actor, in ListInput, op Operation) string {
	return l.pageToken(op.CreatedAt, op.ID, a.Tenant, normalizeStates(in.States), in)
}

// normalizeStates sorts and deduplicates states; none means all of them.
func normalizeStates(in []State) []State {
	if len(in) == 0 {
		return append([]State(nil), States...)
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// Page tokens: version byte, the cursor's creation time in Unix
// microseconds (8 bytes), its operation id, then the first 16 bytes of an
// HMAC-SHA256 over the tenant, the filters and all of that, keyed by a key
// derived from the downstream secret (which every replica shares, so any
// replica accepts any replica's token). Base64url without padding.
const (
	pageTokenVersion = 1
	pageTokenMACLen  = 16
	maxPageTokenLen  = 256
)

func (l *Ledger) pageTokenMAC(payload []byte, tenant string, states []State, in ListInput) []byte {
	k := hmac.New(sha256.New, l.cfg.DownstreamSecret)
	k.Write([]byte("opledger page token v1"))
	m := hmac.New(sha256.New, k.Sum(nil))
	for _, s := range []string{tenant, in.Tool} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	if in.ApprovedUnsent {
		// Only then, so the RPC's tokens are what they were.
		m.Write([]byte("approved-unsent\x00"))
	}
	for _, s := range states {
		m.Write([]byte(s))
		m.Write([]byte{','})
	}
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)[:pageTokenMACLen]
}

func (l *Ledger) pageToken(at time.Time, id, tenant string, states []State, in ListInput) string {
	b := make([]byte, 0, 9+len(id)+pageTokenMACLen)
	b = append(b, pageTokenVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixMicro()))
	b = append(b, id...)
	b = append(b, l.pageTokenMAC(b, tenant, states, in)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (l *Ledger) openPageToken(token, tenant string, states []State, in ListInput) (time.Time, string, bool) {
	if len(token) > maxPageTokenLen {
		return time.Time{}, "", false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(b) < 9+1+pageTokenMACLen || b[0] != pageTokenVersion {
		return time.Time{}, "", false
	}
	payload, mac := b[:len(b)-pageTokenMACLen], b[len(b)-pageTokenMACLen:]
	if !hmac.Equal(mac, l.pageTokenMAC(payload, tenant, states, in)) {
		return time.Time{}, "", false
	}
	return time.UnixMicro(int64(binary.BigEndian.Uint64(payload[1:9]))), string(payload[9:]), true
}
