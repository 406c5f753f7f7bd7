package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/opledger/opledger/audit"
	"github.com/opledger/opledger/store/internal/db"
)

// AuditQuery selects the operations a verification or an export reads.
type AuditQuery struct {
	// Tenant, when set, keeps only that tenant's operations.
	Tenant string
	// Since and Until, when set, keep operations changed at or after Since
	// and created before Until.
	Since, Until time.Time
	// AfterID is the cursor: the last id of the previous page.
	AfterID string
	// Limit is the most operations returned.
	Limit int32
}

// AuditRecord is an operation with its events in seq order, as the
// receipts' checks read them.
type AuditRecord struct {
	Operation audit.Operation
	Events    []audit.Event
}

// AuditPage returns up to q.Limit operations after q.AfterID in id order,
// each with all its events. Two statements, not one transaction: an
// operation changed between them shows as a break only if the events are
// read behind the row, which the second statement (after the first) never
// is for a committed change; verify a quiet database to be sure.
func (c *Conn) AuditPage(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	p := db.AuditOperationPageParams{AfterID: q.AfterID, Tenant: q.Tenant, PageLimit: q.Limit}
	if !q.Since.IsZero() {
		p.Since = pgtype.Timestamptz{Time: q.Since, Valid: true}
	}
	if !q.Until.IsZero() {
		p.Until = pgtype.Timestamptz{Time: q.Until, Valid: true}
	}
	rows, err := c.q.AuditOperationPage(ctx, c.dbtx, p)
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]AuditRecord, len(rows))
	ids := make([]string, len(rows))
	at := make(map[string]int, len(rows))
	for i, r := range rows {
		ids[i], at[r.ID] = r.ID, i
		out[i].Operation = audit.Operation{
			ID: r.ID, Tenant: r.Tenant, Tool: r.Tool, ToolVersion: r.ToolVersion, Args: r.Args, Fingerprint: r.Fingerprint,
			State: r.State, DownstreamKey: r.DownstreamKey, ExternalRef: r.ExternalRef.String, Result: r.Result, Error: r.Error,
			PolicyDigest: r.PolicyDigest, ApprovalsNeeded: r.ApprovalsNeeded, Approvals: r.Approvals,
			Attempts: r.Attempts, Fence: r.Fence, Events: r.Events, ChainHead: r.ChainHead,
			CreatedAt: r.CreatedAt.Time, UpdatedAt: r.UpdatedAt.Time,
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	evs, err := c.q.AuditEvents(ctx, c.dbtx, ids)
	if err != nil {
		return nil, interpretError(err)
	}
	for _, e := range evs {
		ev := audit.Event{OperationID: e.OperationID, Seq: e.Seq, Type: e.Type, Actor: e.Actor, FromState: e.FromState.String,
			ToState: e.ToState, Attempt: e.Attempt, Fence: e.Fence, Detail: e.Detail, CreatedAt: e.CreatedAt.Time, Hash: e.Hash}
		if e.Facts != nil {
			if err := json.Unmarshal(e.Facts, &ev.Facts); err != nil {
				// Not an object of strings: kept out of the facts, so the
				// event's hash check reports it.
				ev.Facts = map[string]*string{"": ptr(fmt.Sprintf("unreadable facts: %v", err))}
			}
		}
		i := at[e.OperationID]
		out[i].Events = append(out[i].Events, ev)
	}
	return out, nil
}

func ptr(s string) *string { return &s }
