package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
// each with all its events. Read it in a snapshot (Store.InSnapshot): in
// two statements of their own, a change committed between the row's read
// and its events' would read as a break.
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
		if e.Facts.Valid {
			if err := json.Unmarshal([]byte(e.Facts.String), &ev.Facts); err != nil {
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

// InSnapshot runs fn in one read-only REPEATABLE READ transaction: every
// statement in it sees the same committed state, as a verification or an
// export must (the rows, their events, the checkpoints and their leaves of
// one moment).
func (s *Store) InSnapshot(ctx context.Context, fn func(c *Conn) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return interpretError(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(&Conn{dbtx: tx, q: db.New()}); err != nil {
		return err
	}
	return interpretError(tx.Commit(ctx))
}

// auditCheckpointLockID is the advisory lock key of the checkpoint task:
// one replica at a time signs.
const auditCheckpointLockID int64 = 0x6f706c6164697401 // "opladit" 1

// AuditCheckpointBatch bounds the chain heads one checkpoint commits to; a
// busier interval takes several checkpoints.
const AuditCheckpointBatch = 10000

// AuditScanSlack is how much earlier than the open transactions' earliest
// start a checkpoint's scan horizon is put: the instant between a
// transaction taking its start time and showing it in pg_stat_activity,
// and a promoted standby's clock up to that much behind the old primary's.
// Rereading that much of the changes costs little against the default
// one-minute interval (the anti-join drops those already checkpointed).
const AuditScanSlack = 10 * time.Second

// AuditFullScanEvery makes every so many completed checkpoint scans of a
// Store (the first included: about once an hour at the default interval, on the
// replica that holds the lock) read the whole table, so that a change the
// incremental scans missed (a database clock stepped back by more than
// AuditScanSlack, a writer pg_stat_activity did not show) is committed to
// all the same, and heads of operations pruned meanwhile are swept.
const AuditFullScanEvery = 60

// auditScan tunes the checkpoint's scan; Open sets the defaults above and
// tests shrink them. fullEvery is at least 1.
type auditScan struct {
	batch     int32
	slack     time.Duration
	fullEvery int64
}

func defaultAuditScan() auditScan {
	return auditScan{batch: AuditCheckpointBatch, slack: AuditScanSlack, fullEvery: AuditFullScanEvery}
}

// AuditCheckpoint makes the next checkpoint, if no other replica is making
// one and some chain head changed since the last: in one transaction, under
// the checkpoint lock, it reads the last checkpoint and the changed heads
// (at most AuditCheckpointBatch), lets next build and sign the checkpoint
// (audit.NextCheckpoint), and records it with its leaves. It returns nil
// when there was nothing to do or another replica held the lock.
//
// The changed heads are looked for only among operations changed at or
// after the last checkpoint's scan horizon (AuditScanHorizon: no
// transaction the scan cannot see wrote before it), so a checkpoint reads
// what changed since the last one, not the whole table; a full batch moves
// the horizon only as far as the batch reached, and every
// AuditFullScanEvery-th scan, or one whose clock reads earlier than the
// last horizon, reads from the beginning; such a scan that finds nothing
// moves the last checkpoint's horizon to its own.
func (s *Store) AuditCheckpoint(ctx context.Context,
	next func(last *audit.Checkpoint, changed []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error)) (*audit.Checkpoint, error) {
	var made *audit.Checkpoint
	scan := s.auditScan
	// READ COMMITTED whatever the server's default: the scan's snapshot
	// must be taken after the horizon is read (AuditScanHorizon).
	var scanned bool
	err := s.inTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(c *Conn) error {
		made, scanned = nil, false
		locked, err := c.q.AuditCheckpointLock(ctx, c.dbtx, auditCheckpointLockID)
		if err != nil || !locked {
			return interpretError(err)
		}
		scanned = true
		lastRows, err := c.q.AuditCheckpointLast(ctx, c.dbtx)
		if err != nil {
			return interpretError(err)
		}
		lastHorizon := pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
		if len(lastRows) == 1 && lastRows[0].ScanHorizon.Valid {
			lastHorizon = lastRows[0].ScanHorizon
		}
		hr, err := c.q.AuditScanHorizon(ctx, c.dbtx, scan.slack.Seconds())
		if err != nil {
			return interpretError(err)
		}
		horizon := hr.Horizon
		// A full scan: every fullEvery-th scan this Store completes (its
		// first included; one that failed is tried again), and whenever the
		// clock reads earlier than the last horizon (it stepped back, and
		// the changes since have earlier times).
		full := s.auditScans.Load()%scan.fullEvery == 0 || timeBefore(hr.Clock, lastHorizon)
		since := lastHorizon
		if full {
			since = pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
			if err := c.q.AuditHeadSweep(ctx, c.dbtx); err != nil {
				return interpretError(err)
			}
		}
		if !horizon.Valid {
			// A writer pg_stat_activity hides: the last horizon still holds.
			horizon = lastHorizon
		}
		rows, err := c.q.AuditHeadsChanged(ctx, c.dbtx, db.AuditHeadsChangedParams{Since: since, BatchSize: scan.batch})
		if err != nil {
			return interpretError(err)
		}
		if len(rows) == 0 {
			if full && len(lastRows) == 1 && horizon != lastHorizon {
				// After a step back the horizon comes back to the clock,
				// and the next scan need not read everything again.
				return interpretError(c.q.AuditCheckpointHorizonSet(ctx, c.dbtx, db.AuditCheckpointHorizonSetParams{
					ScanHorizon: horizon, Seq: lastRows[0].Seq}))
			}
			return nil
		}
		if len(rows) == int(scan.batch) && timeBefore(rows[0].Latest, horizon) {
			// A full batch: the next scan starts where this one stopped.
			horizon = rows[0].Latest
		}
		changed := make([]audit.Leaf, len(rows))
		for i, r := range rows {
			changed[i] = audit.Leaf{OperationID: r.ID, Events: r.Events, Head: r.ChainHead}
		}
		var last *audit.Checkpoint
		if len(lastRows) == 1 {
			r := lastRows[0]
			last = &audit.Checkpoint{Seq: r.Seq, Size: uint64(r.TreeSize), Root: r.Root, Note: r.Note}
			for _, h := range r.RangeHashes {
				last.Range = append(last.Range, h)
			}
		}
		cp, leaves, err := next(last, changed)
		if err != nil {
			return err
		}
		p := db.AuditCheckpointInsertParams{Seq: cp.Seq, TreeSize: int64(cp.Size), Root: cp.Root, Note: cp.Note, ScanHorizon: horizon}
		for _, h := range cp.Range {
			p.RangeHashes = append(p.RangeHashes, h)
		}
		for _, l := range leaves {
			p.Idxs = append(p.Idxs, int64(l.Index))
			p.OperationIds = append(p.OperationIds, l.OperationID)
			p.EventCounts = append(p.EventCounts, l.Events)
			p.Heads = append(p.Heads, l.Head)
		}
		if err := c.q.AuditCheckpointInsert(ctx, c.dbtx, p); err != nil {
			return interpretError(err)
		}
		made = cp
		return nil
	})
	if err == nil && scanned {
		s.auditScans.Add(1)
	}
	return made, err
}

// timeBefore reports whether a is earlier than b, infinities included.
func timeBefore(a, b pgtype.Timestamptz) bool {
	if a.InfinityModifier != b.InfinityModifier {
		return a.InfinityModifier < b.InfinityModifier
	}
	return a.InfinityModifier == pgtype.Finite && a.Time.Before(b.Time)
}

// AuditCheckpoints returns every checkpoint, oldest first (without their
// ranges).
func (c *Conn) AuditCheckpoints(ctx context.Context) ([]audit.Checkpoint, error) {
	rows, err := c.q.AuditCheckpoints(ctx, c.dbtx)
	if err != nil {
		return nil, interpretError(err)
	}
	out := make([]audit.Checkpoint, len(rows))
	for i, r := range rows {
		out[i] = audit.Checkpoint{Seq: r.Seq, Size: uint64(r.TreeSize), Root: r.Root, Note: r.Note}
	}
	return out, nil
}

// AuditLeaves returns the log's leaves below size, in order; with ids,
// only those operations' leaves (of any size).
func (c *Conn) AuditLeaves(ctx context.Context, size uint64, ids []string) ([]audit.Leaf, error) {
	var out []audit.Leaf
	if ids != nil {
		rows, err := c.q.AuditLeavesOf(ctx, c.dbtx, ids)
		if err != nil {
			return nil, interpretError(err)
		}
		for _, r := range rows {
			out = append(out, audit.Leaf{Index: uint64(r.Idx), OperationID: r.OperationID, Events: r.Events, Head: r.Head})
		}
		return out, nil
	}
	rows, err := c.q.AuditLeaves(ctx, c.dbtx, int64(size))
	if err != nil {
		return nil, interpretError(err)
	}
	for _, r := range rows {
		out = append(out, audit.Leaf{Index: uint64(r.Idx), OperationID: r.OperationID, Events: r.Events, Head: r.Head})
	}
	return out, nil
}

// AuditVerifyAll checks every operation's receipts in one snapshot (so a
// write committed during the walk is not half seen), a page at a time, and
// hands each operation's breaks to fn: what `opledger audit verify
// --database` and the chaos run's final check share.
func (s *Store) AuditVerifyAll(ctx context.Context, page int32, fn func(r AuditRecord, breaks []audit.Break)) error {
	return s.InSnapshot(ctx, func(c *Conn) error {
		q := AuditQuery{Limit: page}
		for {
			recs, err := c.AuditPage(ctx, q)
			if err != nil {
				return err
			}
			for _, r := range recs {
				fn(r, audit.VerifyOperation(r.Operation, r.Events, nil))
			}
			if len(recs) < int(q.Limit) {
				return nil
			}
			q.AfterID = recs[len(recs)-1].Operation.ID
		}
	})
}
