package store_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/note"

	"github.com/opledger/opledger/audit"
	"github.com/opledger/opledger/store"
)

// TestAuditLinkSQLMatchesGo: the hash a statement computes in SQL
// (audit_link, migration 0017) from an event's doc hash and the fields only
// the row knows is byte for byte the one the verifier computes
// (audit.EventHash), for a first event (NULL prev and from_state), a from
// state beyond ASCII, large counters and a time with microseconds; and a
// NULL doc hash (receipts off) gives NULL.
func TestAuditLinkSQLMatchesGo(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	ctx := t.Context()
	at := time.Date(2026, 12, 3, 18, 0, 0, 123456000, time.UTC)
	prev := make([]byte, 32)
	for i := range prev {
		prev[i] = byte(255 - i)
	}
	v := "é 😀 \"\\ \n"
	for _, c := range []struct {
		name string
		prev []byte
		from string
	}{
		{"first", nil, ""},
		{"chained", prev, "READY"},
		{"unicode", prev, "ÉTAT 😀"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := audit.Event{OperationID: "op_ü\"x", Seq: 7, Type: "SUCCEEDED", Actor: "actor \\ \"a\"", FromState: c.from,
				ToState: "SUCCEEDED", Attempt: 3, Fence: 1<<40 + 5, Detail: "q\"b\\s/t\tn\x01\x7f", CreatedAt: at,
				Facts: map[string]*string{"tool_version": &v, "a_null": nil}}
			doc, err := audit.DocHash(ev)
			require.NoError(t, err)
			var from any
			if c.from != "" {
				from = c.from
			}
			var hash []byte
			require.NoError(t, g.pool.QueryRow(ctx, `SELECT audit_link($1, $2, $3, $4, $5, $6, $7)`,
				c.prev, doc, ev.Seq, ev.Attempt, ev.Fence, ev.CreatedAt, from).Scan(&hash))
			want, err := audit.EventHash(c.prev, ev)
			require.NoError(t, err)
			require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(hash))
		})
	}
	var null []byte
	require.NoError(t, g.pool.QueryRow(ctx, `SELECT audit_link($1, NULL, 1, 0, 0, statement_timestamp(), NULL)`, prev).Scan(&null))
	require.Nil(t, null, "receipts off: no hash")
}

// auditDB drives operations through the store's own statements, so that
// their chains are the ones production writes.
type auditDB struct {
	*guardDB
	url string
	n   int
}

func (a *auditDB) records(t *testing.T, ids ...string) map[string]store.AuditRecord {
	t.Helper()
	recs, err := a.st.AuditPage(t.Context(), store.AuditQuery{Limit: 1000})
	require.NoError(t, err)
	out := map[string]store.AuditRecord{}
	for _, r := range recs {
		out[r.Operation.ID] = r
	}
	for _, id := range ids {
		require.Contains(t, out, id)
	}
	return out
}

func (a *auditDB) verify(t *testing.T, id string, off audit.Off) []audit.Break {
	t.Helper()
	r := a.records(t, id)[id]
	return audit.VerifyOperation(r.Operation, r.Events, off)
}

// awaiting prepares an operation that awaits one approval and returns its
// id and arguments.
func (a *auditDB) awaiting(t *testing.T) (string, []byte) {
	t.Helper()
	a.n++
	id := fmt.Sprintf("op_audit%018d", a.n)
	args := []byte(`{"invoice_id":"inv_1","amount_minor":500,"currency":"EUR"}`)
	_, inserted, err := a.st.OperationInsert(t.Context(), store.NewOperation{ID: id, Tenant: "acme", Tool: "pay_invoice", ToolVersion: "1",
		IdempotencyKey: id, Args: args, Fingerprint: "v1:fp" + id, State: "AWAITING_APPROVAL", PreparedBy: "pr_agent",
		ApprovalRequired: true, ApprovalTTL: time.Minute, DownstreamKey: "opk_" + id, Actor: "agent",
		ApprovalsNeeded: 1, PolicyDigest: "pd1", ApprovalRule: "approval.required"})
	require.NoError(t, err)
	require.True(t, inserted)
	return id, args
}

// approved is an operation that awaited approval, was approved, claimed
// and succeeded with a result: PREPARED, APPROVED, CLAIMED, SUCCEEDED.
func (a *auditDB) approved(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	id, args := a.awaiting(t)
	one := int32(1)
	_, err := a.st.OperationDecide(ctx, store.Decision{Tenant: "acme", ID: id, From: []string{"AWAITING_APPROVAL"}, To: "READY",
		Decision: "APPROVE", DecidedBy: "pr_approver", DecidedByName: "alice", ApprovedFingerprint: "v1:fp" + id, Reason: "ok",
		Event: "APPROVED", Actor: "alice", ApprovalsNeeded: &one, PolicyDigest: "pd1", ShownArgs: args})
	require.NoError(t, err)
	op, claimed, err := a.st.OperationClaim(ctx, "acme", id, store.Claim{From: "READY", To: "EXECUTING", Event: "CLAIMED", RequireApprovalInForce: true},
		store.Lease{Owner: "srv", Duration: time.Minute, Actor: "server"})
	require.NoError(t, err)
	require.True(t, claimed)
	_, err = a.st.OperationTransition(ctx, store.TransitionParams{Tenant: "acme", ID: id, From: []string{"EXECUTING"}, Fence: op.Fence, To: "SUCCEEDED",
		ExternalRef: "ch_1", Result: []byte(`{"status": "succeeded", "id": "ch_1"}`), Event: "SUCCEEDED", Actor: "server", Base: op})
	require.NoError(t, err)
	return id
}

// oneCall is the one-call path (born EXECUTING), taken over, then an
// unknown outcome that a reconciliation resolves, with the policy judged
// again on the way: every statement that writes an event.
func (a *auditDB) oneCall(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	a.n++
	id := fmt.Sprintf("op_audit%018d", a.n)
	op, inserted, err := a.st.OperationInsert(ctx, store.NewOperation{ID: id, Tenant: "acme", Tool: "send_email", ToolVersion: "1",
		IdempotencyKey: id, Args: []byte(`{"to":"a@b","subject":"hi","body":"é\n"}`), Fingerprint: "v1:fp" + id, State: "READY",
		PreparedBy: "pr_agent", DownstreamKey: "opk_" + id, Actor: "agent", PolicyDigest: "pd1",
		Claim: &store.Claim{From: "READY", To: "EXECUTING", Event: "CLAIMED"}, Lease: store.Lease{Owner: "srv", Duration: time.Millisecond}})
	require.NoError(t, err)
	require.True(t, inserted)
	time.Sleep(5 * time.Millisecond) // the lease must have expired on the database's clock for the takeover
	op, err = a.st.OperationTakeOver(ctx, store.TakeOver{Tenant: "acme", ID: id, From: "EXECUTING", Event: "LEASE_TAKEN_OVER", Fence: op.Fence},
		store.Lease{Owner: "srv2", Duration: time.Minute, Actor: "reconciler"})
	require.NoError(t, err)
	op, err = a.st.OperationTransition(ctx, store.TransitionParams{Tenant: "acme", ID: id, From: []string{"EXECUTING"}, Fence: op.Fence, To: "OUTCOME_UNKNOWN",
		SetError: true, Error: []byte(`{"reason":"timeout"}`), Event: "OUTCOME_UNKNOWN", Actor: "server", Detail: "timed out", Base: op})
	require.NoError(t, err)
	_, err = a.st.OperationTransition(ctx, store.TransitionParams{Tenant: "acme", ID: id, From: []string{"OUTCOME_UNKNOWN"}, Fence: op.Fence, To: "SUCCEEDED",
		ExternalRef: "em_9", SetError: true, Error: nil, Result: []byte(`{"id":"em_9"}`), Event: "RECONCILED", Actor: "reconciler", Base: op})
	require.NoError(t, err)
	return id
}

func newAuditDB(t *testing.T) *auditDB {
	t.Helper()
	g, url := openGuardDB(t)
	return &auditDB{guardDB: g, url: url}
}

// TestAuditChainsVerify: operations written by every statement that
// writes an event verify with no break, including a policy re-judgement.
func TestAuditChainsVerify(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	ctx := t.Context()
	ids := []string{a.approved(t), a.oneCall(t)}
	// A policy change judged on an operation awaiting approval.
	a.n++
	id := fmt.Sprintf("op_audit%018d", a.n)
	_, _, err := a.st.OperationInsert(ctx, store.NewOperation{ID: id, Tenant: "acme", Tool: "pay_invoice", ToolVersion: "1",
		IdempotencyKey: id, Args: []byte(`{"amount_minor":1}`), Fingerprint: "v1:x", State: "AWAITING_APPROVAL", PreparedBy: "pr_agent",
		ApprovalRequired: true, ApprovalTTL: time.Minute, DownstreamKey: "opk_" + id, Actor: "agent", ApprovalsNeeded: 1, PolicyDigest: "pd1"})
	require.NoError(t, err)
	_, err = a.st.OperationPolicyApply(ctx, store.PolicyApply{Tenant: "acme", ID: id, From: []string{"AWAITING_APPROVAL"}, To: "AWAITING_APPROVAL",
		OldDigest: "pd1", PolicyDigest: "pd2", ApprovalsNeeded: 2, ApprovalTTL: time.Minute, ApprovalRule: "r", RequireShort: true,
		Event: "POLICY_CHANGED", Actor: "server"})
	require.NoError(t, err)
	ids = append(ids, id)
	recs := a.records(t, ids...)
	for _, id := range ids {
		r := recs[id]
		require.NotEmpty(t, r.Events)
		for _, e := range r.Events {
			require.NotNil(t, e.Hash, "%s event %d", id, e.Seq)
		}
		require.Empty(t, audit.VerifyOperation(r.Operation, r.Events, nil), id)
	}
	// What the approver saw: the approval's event records the fingerprint,
	// the digest of the canonical args, the approver's principal and the
	// policy digest.
	ev := recs[ids[0]].Events[1]
	require.Equal(t, "APPROVED", ev.Type)
	digest, err := audit.Digest(recs[ids[0]].Operation.Args)
	require.NoError(t, err)
	for k, v := range map[string]string{"approver": "pr_approver", "approved_fingerprint": "v1:fp" + ids[0], "args_digest": digest,
		"policy_digest": "pd1", "decision": "APPROVE"} {
		require.NotNil(t, ev.Facts[k], k)
		require.Equal(t, v, *ev.Facts[k], k)
	}
}

// mallory is the doc hash of an APPROVED event by mallory on operation id in
// state READY, as a writer with the table's rights would forge it.
func mallory(t *testing.T, id string) []byte {
	t.Helper()
	doc, err := audit.DocHash(audit.Event{OperationID: id, Type: "APPROVED", Actor: "mallory", ToState: "SUCCEEDED"})
	require.NoError(t, err)
	return doc
}

// TestAuditTamperDetected: each edit of the tables is reported with the
// operation (and the event) it touches, by the check that is switched off
// in its control, which then misses it.
func TestAuditTamperDetected(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	ctx := t.Context()
	exec := func(t *testing.T, sql string, args ...any) {
		t.Helper()
		_, err := a.pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	for _, c := range []struct {
		name   string
		tamper func(t *testing.T, id string)
		off    []audit.Check
		seq    int32 // the event named, 0: the operation
	}{
		{"an event's detail changed", func(t *testing.T, id string) {
			exec(t, `UPDATE operation_event SET detail = 'approved by mallory' WHERE operation_id = $1 AND seq = 2`, id)
		}, []audit.Check{audit.CheckChain}, 2},
		{"an event deleted", func(t *testing.T, id string) {
			exec(t, `DELETE FROM operation_event WHERE operation_id = $1 AND seq = 3`, id)
		}, []audit.Check{audit.CheckChain, audit.CheckSequence}, 4},
		{"an event inserted, its hash computed", func(t *testing.T, id string) {
			exec(t, `INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash)
				SELECT o.id, o.events + 1, 'APPROVED', 'mallory', o.state, o.state, o.attempts, o.fence, '',
				       audit_link(o.chain_head, $2, o.events + 1, o.attempts, o.fence, statement_timestamp(), o.state)
				FROM operation o WHERE o.id = $1`, id, mallory(t, id))
		}, []audit.Check{audit.CheckSequence}, 0},
		{"two events swapped", func(t *testing.T, id string) {
			exec(t, `UPDATE operation_event SET seq = -seq WHERE operation_id = $1 AND seq IN (2, 3)`, id)
			exec(t, `UPDATE operation_event SET seq = CASE seq WHEN -2 THEN 3 ELSE 2 END WHERE operation_id = $1 AND seq < 0`, id)
		}, []audit.Check{audit.CheckChain}, 2},
		{"an operation's amount changed", func(t *testing.T, id string) {
			exec(t, `UPDATE operation SET args = jsonb_set(args, '{amount_minor}', '50000') WHERE id = $1`, id)
		}, []audit.Check{audit.CheckFields}, 1},
		{"an operation's external reference changed", func(t *testing.T, id string) {
			exec(t, `UPDATE operation SET external_ref = 'ch_other' WHERE id = $1`, id)
		}, []audit.Check{audit.CheckFields}, 4},
		{"an approval added to an operation", func(t *testing.T, id string) {
			exec(t, `UPDATE operation SET approvals = approvals || '[{"principal_id":"pr_mallory","decision":"APPROVE","fingerprint":"v1:x"}]' WHERE id = $1`, id)
		}, []audit.Check{audit.CheckFields}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := a.approved(t)
			require.Empty(t, a.verify(t, id, nil), "before the edit")
			c.tamper(t, id)
			breaks := a.verify(t, id, nil)
			require.NotEmpty(t, breaks, "the edit is detected")
			named := false
			for _, b := range breaks {
				require.Equal(t, id, b.OperationID, b.String())
				t.Log(b.String())
				if b.Seq == c.seq {
					named = true
				}
			}
			require.True(t, named, "a break names event %d: %v", c.seq, breaks)
			// The control: the check that caught it switched off misses it.
			off := audit.Off{}
			for _, k := range c.off {
				off[k] = true
			}
			require.Empty(t, a.verify(t, id, off), "with %v off the edit is missed", c.off)
		})
	}
}

// TestAuditCheckpointsTwoReplicas: two replicas checkpoint side by side
// while operations are written; they never conflict (one at a time, by
// the advisory lock), every checkpoint is signed and its root is the tree
// of every leaf so far, each leaf is in it by an inclusion proof, and
// every head changed is committed to by the end.
func TestAuditCheckpointsTwoReplicas(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	ctx := t.Context()
	skey, vkey, err := note.GenerateKey(rand.Reader, "opledger-audit-test")
	require.NoError(t, err)
	signer, err := note.NewSigner(skey)
	require.NoError(t, err)
	verifier, err := note.NewVerifier(vkey)
	require.NoError(t, err)
	other, err := store.Open(ctx, store.Config{URL: a.url, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	next := func(last *audit.Checkpoint, changed []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error) {
		return audit.NextCheckpoint(last, changed, signer)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for _, st := range []*store.Store{a.st, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := st.AuditCheckpoint(ctx, next); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var ids []string
	for range 6 {
		ids = append(ids, a.approved(t))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	_, err = a.st.AuditCheckpoint(ctx, next) // whatever changed last
	require.NoError(t, err)

	cps, err := a.st.AuditCheckpoints(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, cps)
	leaves, err := a.st.AuditLeaves(ctx, cps[len(cps)-1].Size, nil)
	require.NoError(t, err)
	hashes := make([][]byte, len(leaves))
	for i, l := range leaves {
		require.Equal(t, uint64(i), l.Index, "leaves at consecutive indexes")
		hashes[i], err = audit.LeafHash(l)
		require.NoError(t, err)
	}
	for i, cp := range cps {
		require.Equal(t, int64(i+1), cp.Seq, "consecutive checkpoints")
		head, err := audit.OpenCheckpoint(cp.Note, verifier)
		require.NoError(t, err)
		require.Equal(t, cp.Size, head.Size)
		require.NoError(t, audit.CheckRoot(hashes[:cp.Size], head.Hash), "checkpoint %d's root is its leaves' tree", cp.Seq)
	}
	last := cps[len(cps)-1]
	tree := audit.NewTree(hashes)
	for _, l := range leaves {
		p, err := tree.Inclusion(l.Index, last.Size)
		require.NoError(t, err)
		require.NoError(t, audit.VerifyInclusion(l, last.Size, last.Root, p))
	}
	// Every operation's final head is the newest leaf of it.
	recs := a.records(t, ids...)
	newest := map[string]audit.Leaf{}
	for _, l := range leaves {
		newest[l.OperationID] = l
	}
	for _, id := range ids {
		require.Equal(t, recs[id].Operation.ChainHead.String(), newest[id].Head.String(), id)
		require.Equal(t, recs[id].Operation.Events, newest[id].Events, id)
	}
	t.Logf("%d checkpoints, %d leaves", len(cps), len(leaves))
}

// TestAuditNoReceiptsWritesNoChain: a store opened with NoReceipts (the
// bench's baseline) writes the same operations and events with no hash, no
// facts and no chain head, which verify as written before the chains
// began.
func TestAuditNoReceiptsWritesNoChain(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	off, err := store.Open(t.Context(), store.Config{URL: a.url, MaxConns: 2, NoReceipts: true})
	require.NoError(t, err)
	t.Cleanup(off.Close)
	a.st = off
	ids := []string{a.approved(t), a.oneCall(t)}
	recs := a.records(t, ids...)
	for _, id := range ids {
		r := recs[id]
		require.Nil(t, r.Operation.ChainHead, id)
		require.NotEmpty(t, r.Events, id)
		for _, e := range r.Events {
			require.Nil(t, e.Hash, "%s event %d", id, e.Seq)
			require.Nil(t, e.Facts, "%s event %d", id, e.Seq)
		}
		require.Empty(t, audit.VerifyOperation(r.Operation, r.Events, nil), id)
	}
}

// TestAuditPolicyNeverLowersTheQuorum: a policy applied again that demands
// fewer approvals than the operation awaits keeps its quorum, and the
// event's approvals_demanded does not lower what the verifier expects.
func TestAuditPolicyNeverLowersTheQuorum(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	ctx := t.Context()
	id := "op_auditquorum000000000001"
	_, _, err := a.st.OperationInsert(ctx, store.NewOperation{ID: id, Tenant: "acme", Tool: "pay_invoice", ToolVersion: "1",
		IdempotencyKey: id, Args: []byte(`{"amount_minor":1}`), Fingerprint: "v1:x", State: "AWAITING_APPROVAL", PreparedBy: "pr_agent",
		ApprovalRequired: true, ApprovalTTL: time.Minute, DownstreamKey: "opk_" + id, Actor: "agent", ApprovalsNeeded: 2, PolicyDigest: "pd1"})
	require.NoError(t, err)
	op, err := a.st.OperationPolicyApply(ctx, store.PolicyApply{Tenant: "acme", ID: id, From: []string{"AWAITING_APPROVAL"}, To: "AWAITING_APPROVAL",
		OldDigest: "pd1", PolicyDigest: "pd2", ApprovalsNeeded: 1, ApprovalTTL: time.Minute, ApprovalRule: "r", RequireShort: true,
		Event: "POLICY_CHANGED", Actor: "server"})
	require.NoError(t, err)
	require.Equal(t, int32(2), op.ApprovalsNeeded)
	r := a.records(t, id)[id]
	require.Empty(t, audit.VerifyOperation(r.Operation, r.Events, nil))
	_, err = a.pool.Exec(ctx, `UPDATE operation SET approvals_needed = 1 WHERE id = $1`, id)
	require.NoError(t, err)
	r = a.records(t, id)[id]
	require.NotEmpty(t, audit.VerifyOperation(r.Operation, r.Events, nil), "a lowered quorum is a break")
}

// TestAuditCanonicalArgsDigest: args inserted as already canonical
// (NewOperation.ArgsCanonical, as Prepare inserts them) are digested
// without canonicalising them again and verify; the flag on args that are
// not in canonical form is a break, so only Prepare's canonical bytes may
// carry it.
func TestAuditCanonicalArgsDigest(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	ctx := t.Context()
	for _, c := range []struct {
		id, args string
		ok       bool
	}{
		{"op_auditcanonical000000001", "{\"amount_minor\":1,\"currency\":\"EUR\",\"note\":\"é\u2028\"}", true},
		{"op_auditcanonical000000002", `{"currency": "EUR", "amount_minor": 1}`, false},
	} {
		_, _, err := a.st.OperationInsert(ctx, store.NewOperation{ID: c.id, Tenant: "acme", Tool: "pay_invoice", ToolVersion: "1",
			IdempotencyKey: c.id, Args: []byte(c.args), ArgsCanonical: true, Fingerprint: "v1:x", State: "READY", PreparedBy: "pr_agent",
			DownstreamKey: "opk_" + c.id, Actor: "agent", PolicyDigest: "pd1"})
		require.NoError(t, err)
		breaks := a.verify(t, c.id, nil)
		if c.ok {
			require.Empty(t, breaks, c.id)
		} else {
			require.NotEmpty(t, breaks, c.id)
		}
	}
}

// checkpointAll makes checkpoints until none is left to make and returns
// the leaves they appended.
func (a *auditDB) checkpointAll(t *testing.T, st *store.Store, next func(*audit.Checkpoint, []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error)) []audit.Leaf {
	t.Helper()
	var out []audit.Leaf
	for range 100 {
		cp, err := st.AuditCheckpoint(t.Context(), func(last *audit.Checkpoint, changed []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error) {
			c, leaves, err := next(last, changed)
			out = append(out, leaves...)
			return c, leaves, err
		})
		require.NoError(t, err)
		if cp == nil {
			return out
		}
	}
	t.Fatal("checkpoints never caught up")
	return nil
}

// checkpointOnce makes one checkpoint with st and returns its leaves (none
// when there was nothing to do).
func checkpointOnce(t *testing.T, st *store.Store, next func(*audit.Checkpoint, []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error)) []audit.Leaf {
	t.Helper()
	var out []audit.Leaf
	_, err := st.AuditCheckpoint(t.Context(), func(last *audit.Checkpoint, changed []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error) {
		c, leaves, err := next(last, changed)
		out = leaves
		return c, leaves, err
	})
	require.NoError(t, err)
	return out
}

func unsignedNext(t *testing.T) func(*audit.Checkpoint, []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error) {
	skey, _, err := note.GenerateKey(rand.Reader, "opledger-audit-test")
	require.NoError(t, err)
	signer, err := note.NewSigner(skey)
	require.NoError(t, err)
	return func(last *audit.Checkpoint, changed []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error) {
		return audit.NextCheckpoint(last, changed, signer)
	}
}

// newScanDB is an audit database whose store's checkpoint scans put their
// horizon slack early and read the whole table every fullEvery-th scan,
// with a next that signs with a throwaway key.
func newScanDB(t *testing.T, slack time.Duration, fullEvery int64) (*auditDB, func(*audit.Checkpoint, []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error)) {
	t.Helper()
	a := newAuditDB(t)
	store.SetAuditScan(a.st, store.AuditCheckpointBatch, slack, fullEvery)
	return a, unsignedNext(t)
}

// backdate puts the last change of operation id (of every operation when
// id is empty) an hour back, as a clock stepped back would have written it.
func (a *auditDB) backdate(t *testing.T, id string) {
	t.Helper()
	_, err := a.pool.Exec(t.Context(), `UPDATE operation SET updated_at = updated_at - interval '1 hour' WHERE $1 = '' OR id = $1`, id)
	require.NoError(t, err)
}

// stepClockBack puts the checkpoints' horizons an hour ahead of the
// database's clock, as after the clock stepped back an hour.
func (a *auditDB) stepClockBack(t *testing.T) {
	t.Helper()
	_, err := a.pool.Exec(t.Context(), `UPDATE audit_checkpoint SET scan_horizon = now() + interval '1 hour'`)
	require.NoError(t, err)
}

// TestAuditCheckpointSeesALateCommit: a checkpoint reads only what changed
// since the last one's scan horizon, and a chain head written by a
// transaction still open during a checkpoint (so invisible to it) but
// committed after it is in the next checkpoint, though that checkpoint's
// rows are older than the one before it. The scan's slack is 0 here, so
// that only the open transaction's start in pg_stat_activity holds the
// horizon back: a horizon of the checkpoint's own now() would skip it for
// ever.
func TestAuditCheckpointSeesALateCommit(t *testing.T) {
	t.Parallel()
	a, next := newScanDB(t, 0, store.AuditFullScanEvery)
	ctx := t.Context()
	late, args := a.awaiting(t)
	require.Len(t, a.checkpointAll(t, a.st, next), 1, "the prepared operation")

	// The approval, in a transaction left open.
	decided, release, done := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- a.st.InTx(ctx, func(c *store.Conn) error {
			one := int32(1)
			_, err := c.OperationDecide(ctx, store.Decision{Tenant: "acme", ID: late, From: []string{"AWAITING_APPROVAL"}, To: "READY",
				Decision: "APPROVE", DecidedBy: "pr_approver", DecidedByName: "alice", ApprovedFingerprint: "v1:fp" + late, Reason: "ok",
				Event: "APPROVED", Actor: "alice", ApprovalsNeeded: &one, PolicyDigest: "pd1", ShownArgs: args})
			decided <- err
			<-release
			return err
		})
	}()
	require.NoError(t, <-decided)
	other := a.approved(t) // committed after the open approval's statement
	leaves := a.checkpointAll(t, a.st, next)
	require.Len(t, leaves, 1, "only the committed operation")
	require.Equal(t, other, leaves[0].OperationID)

	close(release)
	require.NoError(t, <-done)
	leaves = a.checkpointAll(t, a.st, next)
	require.Len(t, leaves, 1, "the late approval's head")
	require.Equal(t, late, leaves[0].OperationID)
	require.Equal(t, a.records(t, late)[late].Operation.ChainHead.String(), leaves[0].Head.String())
}

// TestAuditCheckpointFullBatches: more changed heads than a checkpoint
// takes are committed to by the checkpoints that follow, each once, though
// they all changed before the first: a full batch moves the scan's horizon
// only as far as it reached. The operations changed an hour ago, so that a
// horizon left at the checkpoint's time would skip those after the first
// batch.
func TestAuditCheckpointFullBatches(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	st, err := store.Open(t.Context(), store.Config{URL: a.url, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	store.SetAuditScan(st, 2, store.AuditScanSlack, store.AuditFullScanEvery)
	var ids []string
	for range 5 {
		ids = append(ids, a.oneCall(t))
	}
	a.backdate(t, "")
	leaves := a.checkpointAll(t, st, unsignedNext(t))
	seen := map[string]int{}
	for _, l := range leaves {
		seen[l.OperationID]++
	}
	for _, id := range ids {
		require.Equal(t, 1, seen[id], "%s committed to once", id)
	}
	require.Len(t, leaves, len(ids))
}

// TestAuditPruneDropsHeads: pruning an operation also deletes the head its
// last checkpoint committed to (audit_head), so that table does not outgrow
// the retention; the log's leaves stay.
func TestAuditPruneDropsHeads(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	ctx := t.Context()
	id := a.approved(t)
	require.Len(t, a.checkpointAll(t, a.st, unsignedNext(t)), 1)
	count := func(table string) int {
		var n int
		require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE operation_id = $1`, id).Scan(&n))
		return n
	}
	require.Equal(t, 1, count("audit_head"))
	deleted, err := a.st.OperationPrune(ctx, 0, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, deleted)
	require.Equal(t, 0, count("audit_head"), "the pruned operation's head")
	require.Equal(t, 1, count("audit_leaf"), "the log keeps its leaf")
}

// TestAuditCheckpointReadCommitted: the checkpoint's scan takes its
// snapshot after the horizon is read even where the server's default
// isolation is REPEATABLE READ (whose snapshot is the transaction's first
// statement's). An operation inserted by a transaction that began before
// the checkpoint's and committed between the checkpoint's first statement
// and its horizon's read (so it was neither open then nor, under REPEATABLE
// READ, visible to the scan) is in this checkpoint or the next.
func TestAuditCheckpointReadCommitted(t *testing.T) {
	t.Parallel()
	a := newAuditDB(t)
	ctx := t.Context()
	var dbname string
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbname))
	_, err := a.pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{dbname}.Sanitize()+` SET default_transaction_isolation = 'repeatable read'`)
	require.NoError(t, err)
	st, err := store.Open(ctx, store.Config{URL: a.url, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	store.SetAuditScan(st, store.AuditCheckpointBatch, 0, 1000)
	next := unsignedNext(t)
	a.oneCall(t)
	require.Len(t, checkpointOnce(t, st, next), 1)
	visible := a.oneCall(t) // so that the checkpoint is made, and its horizon stored

	// The insert, in a transaction left open until the checkpoint has begun.
	a.n++
	early := fmt.Sprintf("op_audit%018d", a.n)
	inserted, release, done := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- a.st.InTx(ctx, func(c *store.Conn) error {
			_, _, err := c.OperationInsert(ctx, store.NewOperation{ID: early, Tenant: "acme", Tool: "pay_invoice", ToolVersion: "1",
				IdempotencyKey: early, Args: []byte(`{"invoice_id":"inv_1","amount_minor":500,"currency":"EUR"}`), Fingerprint: "v1:fp" + early,
				State: "AWAITING_APPROVAL", PreparedBy: "pr_agent", ApprovalRequired: true, ApprovalTTL: time.Minute, DownstreamKey: "opk_" + early,
				Actor: "agent", ApprovalsNeeded: 1, PolicyDigest: "pd1", ApprovalRule: "approval.required"})
			inserted <- err
			<-release
			return err
		})
	}()
	require.NoError(t, <-inserted)
	var once sync.Once
	store.SetTxBefore(st, func(n int) {
		if n == 2 { // after the checkpoint's first statement, before the horizon's read
			once.Do(func() { close(release); require.NoError(t, <-done) })
		}
	})
	leaves := checkpointOnce(t, st, next)
	store.SetTxBefore(st, func(int) {})
	leaves = append(leaves, checkpointOnce(t, st, next)...)
	var ids []string
	for _, l := range leaves {
		ids = append(ids, l.OperationID)
	}
	require.ElementsMatch(t, []string{visible, early}, ids, "the operation committed between the checkpoint's statements too")
}

// TestAuditFullScanCatchesAMissedChange: a change the incremental scans
// cannot see (its updated_at before the last horizon, as after the
// database's clock stepped back by less than it could tell) is committed to
// by the next scan that reads the whole table, every third here, though no
// checkpoint was made in between; that scan also sweeps the heads of
// operations that are gone.
func TestAuditFullScanCatchesAMissedChange(t *testing.T) {
	t.Parallel()
	a, next := newScanDB(t, store.AuditScanSlack, 3)
	ctx := t.Context()
	a.oneCall(t)
	require.Len(t, checkpointOnce(t, a.st, next), 1, "scan 1 (a full scan: the Store's first)")

	stepped := a.oneCall(t)
	a.backdate(t, stepped)
	_, err := a.pool.Exec(ctx, `INSERT INTO audit_head (operation_id, head) VALUES ('op_gone', '\x00')`)
	require.NoError(t, err)
	require.Empty(t, checkpointOnce(t, a.st, next), "scan 2 (incremental) misses the stepped-back change")
	require.Empty(t, checkpointOnce(t, a.st, next), "scan 3 (incremental) too")

	leaves := checkpointOnce(t, a.st, next)
	require.Len(t, leaves, 1, "scan 4 reads the whole table")
	require.Equal(t, stepped, leaves[0].OperationID)
	var orphans int
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(*) FROM audit_head WHERE operation_id = 'op_gone'`).Scan(&orphans))
	require.Zero(t, orphans, "the full scan swept the head of an operation that is gone")
}

// TestAuditCheckpointClockSteppedBack: when the database's clock reads
// earlier than the last checkpoint's horizon (it stepped back, here by an
// hour), the next scan reads the whole table, so the changes made since,
// whose times are before that horizon, are committed to at once.
func TestAuditCheckpointClockSteppedBack(t *testing.T) {
	t.Parallel()
	a, next := newScanDB(t, store.AuditScanSlack, 1000)
	a.oneCall(t)
	require.Len(t, checkpointOnce(t, a.st, next), 1)
	a.stepClockBack(t)
	later := a.oneCall(t)
	leaves := checkpointOnce(t, a.st, next)
	require.Len(t, leaves, 1, "the change made after the step")
	require.Equal(t, later, leaves[0].OperationID)

	// A step with nothing changed since: the full scan finds nothing and
	// brings the horizon back to the clock, so the scans after it are
	// incremental again.
	a.stepClockBack(t)
	require.Empty(t, checkpointOnce(t, a.st, next))
	var ahead bool
	require.NoError(t, a.pool.QueryRow(t.Context(), `SELECT scan_horizon > now() FROM audit_checkpoint ORDER BY seq DESC LIMIT 1`).Scan(&ahead))
	require.False(t, ahead, "the horizon back behind the clock")
}

// TestAuditFullScanSurvivesAFailedAttempt: a full scan whose checkpoint
// fails (here its signing) is tried again by the next scan, not skipped
// until the next period.
func TestAuditFullScanSurvivesAFailedAttempt(t *testing.T) {
	t.Parallel()
	a, next := newScanDB(t, store.AuditScanSlack, 2)
	a.oneCall(t)
	require.Len(t, checkpointOnce(t, a.st, next), 1, "scan 1: full")
	other := a.oneCall(t)
	leaves := checkpointOnce(t, a.st, next)
	require.Len(t, leaves, 1, "scan 2: incremental")
	require.Equal(t, other, leaves[0].OperationID)

	stepped := a.oneCall(t)
	a.backdate(t, stepped)
	_, err := a.st.AuditCheckpoint(t.Context(), func(*audit.Checkpoint, []audit.Leaf) (*audit.Checkpoint, []audit.Leaf, error) {
		return nil, nil, errors.New("the signer is away")
	})
	require.Error(t, err, "scan 3: full, failed")
	leaves = checkpointOnce(t, a.st, next)
	require.Len(t, leaves, 1, "scan 3 again: still full")
	require.Equal(t, stepped, leaves[0].OperationID)
}

// TestAuditHeadsChangedUsesIndexes: the checkpoint's scan can read the
// changed operations through the indexes on their state (operation_open)
// and on finished ones' updated_at (operation_finished), so it need not
// read the whole table (with sequential scans disabled, a query no index
// serves still plans one).
func TestAuditHeadsChangedUsesIndexes(t *testing.T) {
	t.Parallel()
	g := newGuardDB(t)
	plan, err := g.st.ExplainGeneric(t.Context(), func(c *store.Conn) error {
		return c.AuditHeadsChanged(t.Context(), time.Now(), 100)
	}, "enable_seqscan = off")
	require.NoError(t, err)
	require.NotContains(t, plan, "Seq Scan on operation", plan)
	require.Contains(t, plan, "operation_finished", plan)
	require.Contains(t, plan, "operation_open", plan)
}
