-- name: OperationInsert :one
-- Inserts a new operation and its PREPARED event in one statement. Returns no
-- row when (tenant, tool, idempotency_key) is taken: the caller then reads the
-- existing operation. ON CONFLICT waits for a concurrent twin to commit, so
-- twins never both insert.
WITH ins AS (
    INSERT INTO operation (id, tenant, tool, tool_version, idempotency_key, args, fingerprint, state,
                           prepared_by, approval_required, approval_ttl_ms, downstream_key, events)
    VALUES (sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(tool), sqlc.arg(tool_version), sqlc.arg(idempotency_key), sqlc.arg(args), sqlc.arg(fingerprint), sqlc.arg(state),
            sqlc.arg(prepared_by), sqlc.arg(approval_required), sqlc.arg(approval_ttl_ms), sqlc.arg(downstream_key), 1)
    ON CONFLICT ON CONSTRAINT operation_idempotency DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
    SELECT ins.id, 1, 'PREPARED', sqlc.arg(actor), NULL, ins.state, 0, 0, sqlc.arg(detail) FROM ins
)
SELECT * FROM ins;

-- name: OperationGetByKey :one
SELECT * FROM operation
WHERE tenant = sqlc.arg(tenant) AND tool = sqlc.arg(tool) AND idempotency_key = sqlc.arg(idempotency_key);

-- name: OperationGet :one
-- db_now is the database's clock, against which the caller judges leases
-- and retention.
SELECT *, now()::timestamptz AS db_now FROM operation
WHERE id = sqlc.arg(id) AND tenant = sqlc.arg(tenant);

-- name: OperationGetForUpdate :one
SELECT * FROM operation
WHERE id = sqlc.arg(id) AND tenant = sqlc.arg(tenant)
FOR UPDATE;

-- name: OperationEvents :many
SELECT * FROM operation_event
WHERE operation_id = sqlc.arg(operation_id)
ORDER BY seq;

-- name: OperationClaim :many
-- Claims a READY operation whose approval (if required) is in force on the
-- database's clock, or was already exercised by a send (first_sent_fence is
-- set: the operation may have taken effect, and the next claim resubmits the
-- same key to learn the outcome): fence + 1, attempts + 1, and a lease
-- measured on the database's clock, with its CLAIMED event, in one statement.
-- A claim that ends in a release (nothing sent) does not consume the
-- approval. When the operation is not claimable the same statement returns
-- it as it is (claimed = false), so a replayed Execute costs one round trip.
-- That row comes from the statement's snapshot: if a concurrent claim won, it
-- may still read READY, and the caller simply tries again. db_now is the
-- database's clock, against which the caller judges the lease and the
-- approval it reads.
WITH upd AS (
    UPDATE operation o SET
        state = 'EXECUTING',
        fence = o.fence + 1,
        attempts = o.attempts + 1,
        lease_owner = sqlc.arg(lease_owner),
        lease_expires_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        next_reconcile_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        first_claimed_at = COALESCE(o.first_claimed_at, now()),
        events = o.events + 1,
        updated_at = now()
    WHERE o.id = sqlc.arg(id) AND o.tenant = sqlc.arg(tenant) AND o.state = 'READY'
      AND (NOT o.approval_required OR o.approval_expires_at > now() OR o.first_sent_fence IS NOT NULL
           -- Test-only (the chaos suite's approval-claim control, failpoints
           -- builds): the fixed defect of a claim consuming the approval.
           OR (sqlc.arg(unsafe_claim_consumes_approval)::boolean AND o.fence > 0))
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
    SELECT upd.id, upd.events, 'CLAIMED', sqlc.arg(actor), 'READY', upd.state, upd.attempts, upd.fence, '' FROM upd
)
SELECT upd.*, true AS claimed, now()::timestamptz AS db_now FROM upd
UNION ALL
SELECT g.*, false AS claimed, now()::timestamptz AS db_now FROM operation g
WHERE g.id = sqlc.arg(id) AND g.tenant = sqlc.arg(tenant) AND NOT EXISTS (SELECT 1 FROM upd);

-- name: OperationTakeOver :one
-- Takes over an EXECUTING operation whose lease expired on the database's
-- clock (only for downstreams that dedupe keys): the old holder's fence
-- becomes stale, and since it may have sent, the operation counts as sent.
-- With a key retention (seconds, 0 = never forgets), the takeover's request,
-- which may reach the downstream as late as ahead_seconds from now, must
-- arrive within 90% of the retention counted from the first claim.
WITH upd AS (
    UPDATE operation o SET
        fence = o.fence + 1,
        first_sent_fence = COALESCE(o.first_sent_fence, o.fence),
        attempts = o.attempts + 1,
        lease_owner = sqlc.arg(lease_owner),
        lease_expires_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        next_reconcile_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        events = o.events + 1,
        updated_at = now()
    WHERE o.id = sqlc.arg(id) AND o.tenant = sqlc.arg(tenant) AND o.state = 'EXECUTING'
      AND o.fence = sqlc.arg(fence) AND o.lease_expires_at < now()
      AND (sqlc.arg(key_retention_seconds)::float8 = 0 OR o.first_claimed_at IS NULL
           OR now() + make_interval(secs => sqlc.arg(ahead_seconds)::float8)
              < o.first_claimed_at + make_interval(secs => 0.9 * sqlc.arg(key_retention_seconds)::float8))
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
    SELECT upd.id, upd.events, 'LEASE_TAKEN_OVER', sqlc.arg(actor), 'EXECUTING', upd.state, upd.attempts, upd.fence,
           'lease expired; previous holder fenced out' FROM upd
)
SELECT * FROM upd;

-- name: OperationTransition :one
-- The one guarded transition for outcomes, reconciliation and cancellation:
-- moves the operation from one of from_states to to_state only if its fence
-- is still the caller's and every condition the caller asks for holds, on
-- the database's clock, in this statement:
--   require_lease_expired: an EXECUTING operation's lease has expired;
--   require_unsent:        nothing may have reached the downstream yet;
--   require_first_send:    no earlier attempt than the current fence may have
--                          reached it (a refusal of a later attempt proves
--                          nothing about an earlier one);
--   key_retention_seconds: (when > 0) a resubmission decided now, reaching the
--                          downstream within ahead_seconds, still falls
--                          inside 90% of the downstream's key retention
--                          counted from the first claim.
-- An attempt that ends any other way than a release (RELEASED: nothing was
-- sent) marks the operation as sent. The event is appended in the same
-- statement. A caller whose guard fails changes nothing and gets no row.
WITH cur AS (
    SELECT c.id, c.state AS old_state FROM operation c
    WHERE c.id = sqlc.arg(id) AND c.tenant = sqlc.arg(tenant)
    FOR UPDATE
), upd AS (
    UPDATE operation o SET
        state = sqlc.arg(to_state)::text,
        external_ref = COALESCE(sqlc.narg(external_ref)::text, o.external_ref),
        result = COALESCE(sqlc.narg(result)::jsonb, o.result),
        error = CASE WHEN sqlc.arg(set_error)::boolean THEN sqlc.narg(error)::jsonb ELSE o.error END,
        first_sent_fence = CASE WHEN o.state = 'EXECUTING' AND sqlc.arg(event_type)::text <> 'RELEASED'
                                THEN COALESCE(o.first_sent_fence, o.fence) ELSE o.first_sent_fence END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        next_reconcile_at = CASE WHEN sqlc.arg(to_state)::text = 'OUTCOME_UNKNOWN'
                                 THEN now() + make_interval(secs => sqlc.arg(reconcile_after_seconds)::float8)
                                 ELSE NULL END,
        reconcile_attempts = CASE WHEN sqlc.arg(to_state)::text = 'OUTCOME_UNKNOWN' THEN o.reconcile_attempts ELSE 0 END,
        events = o.events + 1,
        updated_at = now()
    FROM cur
    WHERE o.id = cur.id
      AND o.state = ANY (sqlc.arg(from_states)::text[])
      AND o.fence = sqlc.arg(fence)
      AND (NOT sqlc.arg(require_lease_expired)::boolean OR o.state <> 'EXECUTING' OR o.lease_expires_at < now())
      AND (NOT sqlc.arg(require_unsent)::boolean OR o.first_sent_fence IS NULL)
      AND (NOT sqlc.arg(require_first_send)::boolean OR o.first_sent_fence IS NULL OR o.first_sent_fence = o.fence)
      AND (sqlc.arg(key_retention_seconds)::float8 = 0 OR o.first_claimed_at IS NULL
           OR now() + make_interval(secs => sqlc.arg(ahead_seconds)::float8)
              < o.first_claimed_at + make_interval(secs => 0.9 * sqlc.arg(key_retention_seconds)::float8))
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
    SELECT upd.id, upd.events, sqlc.arg(event_type)::text, sqlc.arg(actor), cur.old_state, upd.state, upd.attempts, upd.fence, sqlc.arg(detail)
    FROM upd JOIN cur ON cur.id = upd.id
)
SELECT * FROM upd;

-- name: OperationDecide :one
-- Records an approver's decision (or an approval's expiry) guarded on the
-- state. With require_lapsed_unsent (an expiry, a renewal of a lapsed
-- approval, a denial of a READY operation) the approval must also have
-- lapsed on the database's clock and nothing may have been sent: otherwise
-- an Execute that read a lapsed approval could wipe a renewal committed just
-- after that read, or a stalled one could send an operation that may have
-- taken effect back to AWAITING_APPROVAL, where a denial would make it
-- REJECTED with an effect behind it.
WITH upd AS (
    UPDATE operation o SET
        state = sqlc.arg(to_state)::text,
        approval_decision = sqlc.narg(decision)::text,
        approval_decided_by = sqlc.narg(decided_by)::text,
        approval_decided_at = CASE WHEN sqlc.narg(decision)::text IS NULL THEN NULL ELSE now() END,
        approval_expires_at = CASE WHEN sqlc.narg(decision)::text = 'APPROVE'
                                   THEN now() + make_interval(secs => o.approval_ttl_ms / 1000.0)
                                   ELSE NULL END,
        approval_fingerprint = sqlc.narg(approved_fingerprint)::text,
        approval_reason = sqlc.narg(reason)::text,
        events = o.events + 1,
        updated_at = now()
    WHERE o.id = sqlc.arg(id) AND o.tenant = sqlc.arg(tenant) AND o.state = sqlc.arg(from_state)::text
      AND (NOT sqlc.arg(require_lapsed_unsent)::boolean
           OR (o.approval_expires_at <= now() AND o.first_sent_fence IS NULL))
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
    SELECT upd.id, upd.events, sqlc.arg(event_type)::text, sqlc.arg(actor), sqlc.arg(from_state)::text, upd.state, upd.attempts, upd.fence, sqlc.arg(detail)
    FROM upd
)
SELECT * FROM upd;

-- name: OperationClaimUnresolved :many
-- Hands a batch of stuck operations (OUTCOME_UNKNOWN, or EXECUTING with an
-- expired lease) to one reconciler: rows another replica is claiming are
-- skipped, and each claimed row's next attempt is pushed back so no other
-- replica picks it up while this one works on it.
WITH due AS (
    SELECT d.id FROM operation d
    WHERE d.state IN ('EXECUTING', 'OUTCOME_UNKNOWN')
      AND d.next_reconcile_at <= now()
      AND (d.state <> 'EXECUTING' OR d.lease_expires_at < now())
    ORDER BY d.next_reconcile_at
    LIMIT sqlc.arg(batch_size)
    FOR UPDATE SKIP LOCKED
)
UPDATE operation o SET
    reconcile_attempts = o.reconcile_attempts + 1,
    next_reconcile_at = now() + make_interval(secs => LEAST(sqlc.arg(max_backoff_seconds)::float8,
                                                           sqlc.arg(base_backoff_seconds)::float8 * power(2, o.reconcile_attempts)))
FROM due
WHERE o.id = due.id
RETURNING o.*, now()::timestamptz AS db_now;

-- name: OperationCountOpen :many
-- Counts open (non-terminal) operations by state, across tenants, through
-- the operation_open partial index.
SELECT state, count(*)::bigint AS n FROM operation
WHERE state IN ('AWAITING_APPROVAL', 'READY', 'EXECUTING', 'OUTCOME_UNKNOWN')
GROUP BY state;

-- name: OperationPrune :execrows
-- Deletes up to batch_size finished operations (and, by cascade, their
-- events) last changed before the cutoff. Open and OUTCOME_UNKNOWN
-- operations are never pruned. SKIP LOCKED lets replicas prune side by side.
DELETE FROM operation
WHERE id IN (
    SELECT p.id FROM operation p
    WHERE p.state IN ('SUCCEEDED', 'FAILED', 'REJECTED', 'CANCELLED')
      AND p.updated_at < now() - make_interval(secs => sqlc.arg(older_than_seconds)::float8)
    ORDER BY p.updated_at
    LIMIT sqlc.arg(batch_size)
    FOR UPDATE SKIP LOCKED
);

-- name: TenantUsageBump :one
-- Counts one more operation created by the tenant in the current minute and
-- returns the minute's count; the row lock orders concurrent Prepares.
INSERT INTO tenant_usage (tenant, minute, created)
VALUES (sqlc.arg(tenant), date_trunc('minute', now()), 1)
ON CONFLICT (tenant, minute) DO UPDATE SET created = tenant_usage.created + 1
RETURNING created;

-- name: TenantUsagePrune :execrows
DELETE FROM tenant_usage WHERE minute < now() - interval '1 hour';

-- name: OperationGetByDownstreamKeyForUpdate :one
SELECT * FROM operation
WHERE downstream_key = sqlc.arg(downstream_key)
FOR UPDATE;

-- name: WebhookEventInsert :execrows
-- Records a webhook event once; a second delivery inserts nothing.
INSERT INTO webhook_event (tool, id, operation_id)
VALUES (sqlc.arg(tool), sqlc.arg(id), sqlc.narg(operation_id))
ON CONFLICT (tool, id) DO NOTHING;
