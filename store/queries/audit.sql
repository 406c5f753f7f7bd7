-- name: AuditOperationPage :many
-- A page of operations for a verification or an export, in id order after
-- the cursor: every tenant's (tenant empty) or one's, changed at or after
-- since and created before until (each unbounded when NULL). Read only.
SELECT id, tenant, tool, tool_version, args, fingerprint, state, downstream_key, external_ref, result, error,
       policy_digest, approvals_needed, approvals, attempts, fence, events, chain_head, created_at, updated_at
FROM operation
WHERE id > sqlc.arg(after_id)::text
  AND (sqlc.arg(tenant)::text = '' OR tenant = sqlc.arg(tenant)::text)
  AND (sqlc.narg(since)::timestamptz IS NULL OR updated_at >= sqlc.narg(since)::timestamptz)
  AND (sqlc.narg(until)::timestamptz IS NULL OR created_at < sqlc.narg(until)::timestamptz)
ORDER BY id
LIMIT sqlc.arg(page_limit);

-- name: AuditEvents :many
-- The events of the given operations, each operation's in seq order.
SELECT operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, created_at, hash, facts
FROM operation_event
WHERE operation_id = ANY (sqlc.arg(ids)::text[])
ORDER BY operation_id, seq;

-- name: AuditCheckpointLock :one
-- Takes the checkpoint task's lock for the rest of the transaction, if no
-- other replica holds it: one checkpoint at a time.
SELECT pg_try_advisory_xact_lock(sqlc.arg(key)::bigint) AS locked;

-- name: AuditCheckpointLast :many
-- The newest checkpoint, if any.
SELECT seq, tree_size, root, range_hashes, note, scan_horizon FROM audit_checkpoint ORDER BY seq DESC LIMIT 1;

-- name: AuditScanHorizon :one
-- The horizon of the scan that follows this statement in the checkpoint's
-- transaction, slack seconds early (audit_scan_horizon, migration 0020),
-- or NULL when a session hidden from this role may write operations. Read
-- before the scan, in a statement of its own: READ COMMITTED (which
-- AuditCheckpoint asks for whatever the default) takes the
-- scan's snapshot when the scan starts, so every transaction the scan
-- cannot see was open when the horizon was read or began after it.
-- clock is the checkpoint's own time, slack seconds early: earlier than the
-- last horizon only when the clock stepped back.
SELECT audit_scan_horizon(sqlc.arg(slack)::float8)::timestamptz AS horizon,
       (now() - make_interval(secs => sqlc.arg(slack)::float8))::timestamptz AS clock;

-- name: AuditCheckpointHorizonSet :exec
-- Moves the last checkpoint's scan horizon after a full scan that found
-- nothing to commit to: nothing it could see was left out, so the horizon
-- it read holds for the next scan (the horizon is bookkeeping, not signed).
UPDATE audit_checkpoint SET scan_horizon = sqlc.arg(scan_horizon)::timestamptz WHERE seq = sqlc.arg(seq);

-- name: AuditHeadsChanged :many
-- Up to batch_size operations changed at or after since whose chain head is
-- not the one their last checkpoint committed to, the earliest changed
-- first, returned in id order with the last change time among them. The
-- two halves are the finished operations (through operation_finished, on
-- updated_at) and the open ones (through operation_open): between them the
-- eight states, and neither reads the finished operations changed before
-- since (TestAuditHeadsChangedUsesIndexes).
SELECT c.id, c.events, c.chain_head, max(c.updated_at) OVER ()::timestamptz AS latest FROM (
    SELECT o.id, o.events, o.chain_head, o.updated_at FROM (
        SELECT f.id, f.events, f.chain_head, f.updated_at FROM operation f
        WHERE f.state IN ('SUCCEEDED', 'FAILED', 'REJECTED', 'CANCELLED')
          AND f.updated_at >= sqlc.arg(since)::timestamptz
        UNION ALL
        SELECT p.id, p.events, p.chain_head, p.updated_at FROM operation p
        WHERE p.state IN ('AWAITING_APPROVAL', 'READY', 'EXECUTING', 'OUTCOME_UNKNOWN')
          AND p.updated_at >= sqlc.arg(since)::timestamptz
    ) o
    LEFT JOIN audit_head h ON h.operation_id = o.id
    WHERE o.chain_head IS NOT NULL AND h.head IS DISTINCT FROM o.chain_head
    ORDER BY o.updated_at
    LIMIT sqlc.arg(batch_size)
) c
ORDER BY c.id;

-- name: AuditCheckpointInsert :exec
-- Records a checkpoint with its leaves, and the heads it committed to, in
-- one statement. The arrays of texts and byteas are read with unnest,
-- once each (subscripting such an array walks it from its start, so reading
-- a batch element by element cost PostgreSQL time in the square of its
-- size: docs/performance.md, finding 38); the arrays of integers, whose
-- elements have a fixed width, are subscripted.
WITH cp AS (
    INSERT INTO audit_checkpoint (seq, tree_size, root, range_hashes, note, scan_horizon)
    VALUES (sqlc.arg(seq), sqlc.arg(tree_size), sqlc.arg(root), sqlc.arg(range_hashes)::bytea[], sqlc.arg(note),
            sqlc.narg(scan_horizon)::timestamptz)
    RETURNING seq
), u AS (
    SELECT o.i, o.operation_id, h.head
    FROM unnest(sqlc.arg(operation_ids)::text[]) WITH ORDINALITY AS o (operation_id, i)
    JOIN unnest(sqlc.arg(heads)::bytea[]) WITH ORDINALITY AS h (head, i) ON h.i = o.i
), leaves AS (
    INSERT INTO audit_leaf (idx, checkpoint_seq, operation_id, events, head)
    SELECT (sqlc.arg(idxs)::bigint[])[u.i], cp.seq, u.operation_id, (sqlc.arg(event_counts)::integer[])[u.i], u.head
    FROM cp, u
)
INSERT INTO audit_head (operation_id, head)
SELECT u.operation_id, u.head FROM u
WHERE EXISTS (SELECT 1 FROM operation o WHERE o.id = u.operation_id) -- not one pruned meanwhile
ON CONFLICT (operation_id) DO UPDATE SET head = EXCLUDED.head;

-- name: AuditHeadSweep :exec
-- Deletes the heads of operations that are gone: one the pruner deleted
-- while a checkpoint that had read it was recording its head (the prune's
-- snapshot cannot see that row). Run by the checkpoints that scan the whole
-- table.
DELETE FROM audit_head h WHERE NOT EXISTS (SELECT 1 FROM operation o WHERE o.id = h.operation_id);

-- name: AuditCheckpoints :many
-- Every checkpoint, oldest first.
SELECT seq, tree_size, root, note FROM audit_checkpoint ORDER BY seq;

-- name: AuditLeaves :many
-- The log's leaves below tree_size, in order (to build inclusion proofs).
SELECT idx, operation_id, events, head FROM audit_leaf WHERE idx < sqlc.arg(tree_size) ORDER BY idx;

-- name: AuditLeavesOf :many
-- The leaves of the given operations, in log order.
SELECT idx, operation_id, events, head FROM audit_leaf WHERE operation_id = ANY (sqlc.arg(ids)::text[]) ORDER BY idx;
