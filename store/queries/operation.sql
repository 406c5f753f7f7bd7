-- The statements that read or change one operation find it by its primary
-- key (id) and check its tenant (and a state written as a constant) with IS
-- NOT DISTINCT FROM: the same test as = here (neither is ever NULL), but
-- not one an index can search by, so the planner cannot prefer
-- operation_list (tenant, state, created_at, id) or operation_open (state)
-- to the primary key. It does when the table has no statistics yet (a new
-- database, or before autovacuum's first ANALYZE), in the generic plan a
-- pooled connection then keeps, and such a plan walks every entry of the
-- tenant in that state, dead versions included, to find one row
-- (TestGuardedStatementsFindTheRowByItsKey).

-- name: OperationInsert :one
-- Inserts a new operation and its PREPARED event in one statement (and, with
-- notify, the approval notification of an operation that awaits approval:
-- the outbox row commits with the operation or not at all). With claim (the
-- one-call path: Prepare that also executes, for a tool that needs no
-- approval) the same statement also claims it for the caller: the row is
-- born EXECUTING with fence 1, attempt 1 and a lease measured on the
-- database's clock, and its CLAIMED event (claim_from → claim_to) follows
-- the PREPARED one, exactly as a Prepare followed by a claim would leave it.
-- Returns only the columns the caller cannot know (the clock's, and the
-- args as stored); the store completes the row from what it inserted
-- (NewOperation.row), since every column a statement returns costs a catalog
-- lookup per plan node on every execution (docs/performance.md, finding 31).
-- Returns no row when the operation conflicts with one already stored, which
-- is always the same (tenant, tool, idempotency_key): the caller then reads
-- the existing operation. ON CONFLICT waits for a concurrent twin
-- to commit, so twins never both insert. Every unique index is an arbiter,
-- not only operation_idempotency: a twin has the same downstream key too,
-- and twins that both pass ON CONFLICT's first look meet again on
-- operation_downstream_key, where a non-arbiter index would fail the loser
-- with a unique violation instead of letting it read the winner (ids are
-- random, and a downstream key names one (tenant, tool, key, fingerprint),
-- so any conflict is the twin's). (A claim is only asked for an
-- operation born in claim_from that needs no approval; the table's
-- operation_executing_has_lease rule holds the lease to it.)
-- The events' hashes (migration 0017): store passes the doc hashes of
-- PREPARED (its facts: what the operation is, args_digest being the
-- SHA-256 of the canonical args) and of CLAIMED; PREPARED's link is
-- computed once (prepared_link: a link costs PostgreSQL about 25 000
-- instructions, mostly the SHA-256's set-up and the epoch's numeric, more
-- than the CTE that shares it: docs/performance.md, finding 42), CLAIMED's
-- is chained to it, and the last is the row's chain_head (all NULL with
-- receipts off).
-- With take_identity the same statement takes the tool's business identity
-- for it (ident, IdentityReserve's guard: free, or held under this key by an
-- operation that no longer exists) and inserts the operation only if it did:
-- no row then too, and the caller asks who holds it (IdentityGet). The row
-- lock that ON CONFLICT takes orders concurrent Prepares of one identity and
-- its WHERE is judged on the newest version; an identity taken for an
-- operation whose key turned out taken is undone with the whole statement
-- (operation_admit_check raises OL409, read as "the key is taken"). An
-- operation with budget shares (budget_names) is inserted only if every
-- share is there: a reservation lost to a crash before its asynchronous
-- commit was flushed refuses the insert (OL503, read as unavailable).
WITH prepared_link AS (
    -- PREPARED's link, which the row's chain head (with a claim, through
    -- CLAIMED's) and PREPARED's event both take: computed once.
    SELECT audit_link(NULL, sqlc.narg(prepared_doc)::bytea, 1, 0, 0, statement_timestamp(), NULL) AS h
), ident AS (
    INSERT INTO operation_identity AS i (tenant, tool, identity, operation_id, idempotency_key, window_seconds, free_at)
    SELECT sqlc.arg(tenant), sqlc.arg(tool), sqlc.narg(identity)::text, sqlc.arg(id), sqlc.arg(idempotency_key),
           sqlc.arg(identity_window_seconds)::float8, 'infinity'
    WHERE sqlc.arg(take_identity)::boolean
    ON CONFLICT (tenant, tool, identity) DO UPDATE SET
        operation_id = EXCLUDED.operation_id, idempotency_key = EXCLUDED.idempotency_key,
        window_seconds = EXCLUDED.window_seconds, free_at = 'infinity'
    WHERE identity_free(i.free_at, i.operation_id, i.window_seconds)
       OR i.idempotency_key = EXCLUDED.idempotency_key AND NOT EXISTS (SELECT 1 FROM operation o WHERE o.id = i.operation_id)
    RETURNING i.operation_id
), shares AS (
    -- The operation's shares of the budgets it names (one per limit name):
    -- primary-key probes.
    SELECT count(*) AS found FROM budget_use u
    WHERE sqlc.narg(budget_names)::text[] IS NOT NULL
      AND u.tenant = sqlc.arg(tenant) AND u.name = ANY (sqlc.narg(budget_names)::text[])
      AND u.scope = ANY (sqlc.narg(budget_scopes)::text[]) AND u.operation_id = sqlc.arg(id)
), ins AS (
    INSERT INTO operation (id, tenant, tool, tool_version, idempotency_key, args, fingerprint, state,
                           prepared_by, approval_required, approval_ttl_ms, downstream_key, events, chain_head,
                           fence, attempts, lease_owner, lease_expires_at, next_reconcile_at, first_claimed_at,
                           approvals_needed, policy_digest, approval_rule, approvals, supersedes,
                           budget_names, budget_scopes, identity,
                           approval_decision, approval_decided_by, approval_decided_at, approval_expires_at, approval_fingerprint, approval_reason)
    SELECT sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(tool), sqlc.arg(tool_version), sqlc.arg(idempotency_key), sqlc.arg(args), sqlc.arg(fingerprint),
            CASE WHEN sqlc.arg(claim)::boolean THEN sqlc.arg(claim_to)::text ELSE sqlc.arg(state)::text END,
            sqlc.arg(prepared_by), sqlc.arg(approval_required), sqlc.arg(approval_ttl_ms), sqlc.arg(downstream_key),
            CASE WHEN sqlc.arg(claim)::boolean THEN 2 ELSE 1 END,
            CASE WHEN sqlc.arg(claim)::boolean
                 THEN audit_link((SELECT h FROM prepared_link), sqlc.narg(claimed_doc)::bytea, 2, 1, 1, statement_timestamp(), sqlc.arg(claim_from)::text)
                 ELSE (SELECT h FROM prepared_link) END,
            CASE WHEN sqlc.arg(claim)::boolean THEN 1 ELSE 0 END,
            CASE WHEN sqlc.arg(claim)::boolean THEN 1 ELSE 0 END,
            CASE WHEN sqlc.arg(claim)::boolean THEN sqlc.narg(lease_owner)::text END,
            CASE WHEN sqlc.arg(claim)::boolean THEN now() + make_interval(secs => sqlc.arg(lease_seconds)::float8) END,
            CASE WHEN sqlc.arg(claim)::boolean THEN now() + make_interval(secs => sqlc.arg(lease_seconds)::float8) END,
            CASE WHEN sqlc.arg(claim)::boolean THEN now() END,
            sqlc.arg(approvals_needed)::integer, sqlc.arg(policy_digest)::text, sqlc.arg(approval_rule)::text,
            sqlc.arg(approvals)::jsonb, sqlc.narg(supersedes)::text,
            sqlc.narg(budget_names)::text[], sqlc.narg(budget_scopes)::text[], sqlc.narg(identity)::text,
            -- An edit's operation is born with its editor's approval
            -- (approvals holds it): READY and in force for the TTL when it
            -- completes the quorum.
            CASE WHEN jsonb_array_length(sqlc.arg(approvals)::jsonb) > 0 THEN 'APPROVE' END,
            sqlc.narg(approved_by)::text,
            CASE WHEN jsonb_array_length(sqlc.arg(approvals)::jsonb) > 0 THEN now() END,
            CASE WHEN jsonb_array_length(sqlc.arg(approvals)::jsonb) > 0 AND sqlc.arg(state)::text = 'READY'
                 THEN now() + make_interval(secs => sqlc.arg(approval_ttl_ms)::bigint / 1000.0) END,
            CASE WHEN jsonb_array_length(sqlc.arg(approvals)::jsonb) > 0 THEN sqlc.arg(fingerprint)::text END,
            sqlc.narg(approved_reason)::text
    WHERE (NOT sqlc.arg(take_identity)::boolean OR EXISTS (SELECT 1 FROM ident))
      AND (sqlc.narg(budget_names)::text[] IS NULL
           OR (SELECT found FROM shares) = coalesce(cardinality(sqlc.narg(budget_names)::text[]), 0))
    ON CONFLICT DO NOTHING
    RETURNING id, state, fence, created_at, lease_expires_at, args, chain_head
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash, facts)
    SELECT ins.id, 1, 'PREPARED', sqlc.arg(actor), NULL, sqlc.arg(state)::text, 0, 0, sqlc.arg(detail),
           (SELECT h FROM prepared_link),
           sqlc.narg(prepared_facts)::text FROM ins
), claimed AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash)
    SELECT ins.id, 2, sqlc.arg(claim_event)::text, sqlc.arg(actor), sqlc.arg(claim_from)::text, ins.state, 1, 1, '', ins.chain_head FROM ins WHERE ins.fence = 1
), note AS (
    INSERT INTO approval_notification (operation_id, seq, reason)
    SELECT ins.id, 1, 'prepared' FROM ins WHERE ins.state = 'AWAITING_APPROVAL' AND sqlc.arg(notify)::boolean
)
SELECT ins.created_at, ins.lease_expires_at, ins.args FROM ins
UNION ALL
SELECT NULL::timestamptz, NULL::timestamptz, NULL::jsonb
WHERE CASE WHEN sqlc.arg(take_identity)::boolean OR sqlc.narg(budget_names)::text[] IS NOT NULL
           THEN operation_admit_check(sqlc.arg(take_identity)::boolean, (SELECT count(*) FROM ident), (SELECT count(*) FROM ins),
                                      coalesce(cardinality(sqlc.narg(budget_names)::text[]), 0), (SELECT found FROM shares))
           ELSE false END;


-- name: OperationInsertReserving :one
-- OperationInsert for a tool with one limit, per key (docs/policy.md, "How a
-- reservation is made"): the same statement reserves the operation's share
-- of that limit's budget for the key (budget_name, budget_scope), and stores
-- the operation with its share or neither. The share is judged and counted
-- by one upsert of its budget (res): a budget without a row has no uses
-- (budget_prune deletes a budget only once it holds none, and a share is
-- counted on its row in the statement that writes its use), so a share that
-- fits an empty budget is counted by the row's insert; a budget with a row
-- is locked and judged on its newest version, whose count may still include
-- uses that left the window (stricter than the limit, never looser). The
-- share's bounds reach ON CONFLICT's WHERE through EXCLUDED (max_count,
-- max_sum). The budget's lock is held to the commit, which a budget per key
-- shares with few calls. One share, as scalars: the arrays of several cost
-- PostgreSQL a function scan whose set-up was a quarter of what a budgeted
-- call added to the statement (docs/performance.md, finding 45); a tool with
-- several limits reserves in a statement of its own (budget_reserve). The
-- identity is taken after the share (ident reads res): budgets before
-- identities, the order of the trigger's release at an operation's end and
-- of an edit's reservation (a transaction that also releases the edited
-- operation's, so two such orders can still cross: PostgreSQL undoes one as
-- a deadlock, and the Prepare sends its insert again).
-- operation_admit_reserved undoes the whole statement when the operation is
-- not stored with its share: SQLSTATE OL429 when the share does not fit
-- (read as ErrSharesDoNotFit: the caller then reserves with budget_reserve,
-- which drops the expired uses and judges exactly, or forces an `over:
-- approve` share), OL409 when the identity is held or the key taken (read as
-- "not inserted": the caller asks which). Otherwise as OperationInsert.
WITH prepared_link AS (
    -- As in OperationInsert.
    SELECT audit_link(NULL, sqlc.narg(prepared_doc)::bytea, 1, 0, 0, statement_timestamp(), NULL) AS h
), res AS (
    INSERT INTO budget AS b (tenant, name, scope, used_count, used_sum, window_seconds, max_count, max_sum)
    SELECT sqlc.arg(tenant), sqlc.arg(budget_name)::text, sqlc.arg(budget_scope)::text, 1, sqlc.arg(amount)::float8::numeric, sqlc.arg(share_window)::float8,
           sqlc.arg(max_count)::integer, CASE WHEN sqlc.arg(has_sum)::boolean THEN sqlc.arg(max_sum)::float8::numeric END
    WHERE (sqlc.arg(max_count)::integer = 0 OR sqlc.arg(max_count)::integer >= 1)
      AND (NOT sqlc.arg(has_sum)::boolean OR sqlc.arg(amount)::float8::numeric <= sqlc.arg(max_sum)::float8::numeric)
    ON CONFLICT (tenant, name, scope) DO UPDATE
    SET used_count = b.used_count + 1, used_sum = b.used_sum + EXCLUDED.used_sum, window_seconds = EXCLUDED.window_seconds,
        max_count = EXCLUDED.max_count, max_sum = EXCLUDED.max_sum
    WHERE b.used_count + 1 <= sqlc.arg(max_uses)::integer
      AND (EXCLUDED.max_count = 0 OR b.used_count + 1 <= EXCLUDED.max_count)
      AND (EXCLUDED.max_sum IS NULL OR b.used_sum + EXCLUDED.used_sum <= EXCLUDED.max_sum)
    RETURNING 1
), uses AS (
    INSERT INTO budget_use (tenant, name, scope, operation_id, at, amount)
    VALUES (sqlc.arg(tenant), sqlc.arg(budget_name)::text, sqlc.arg(budget_scope)::text, sqlc.arg(id), statement_timestamp(), sqlc.arg(amount)::float8::numeric)
), ident AS (
    INSERT INTO operation_identity AS i (tenant, tool, identity, operation_id, idempotency_key, window_seconds, free_at)
    SELECT sqlc.arg(tenant), sqlc.arg(tool), sqlc.narg(identity)::text, sqlc.arg(id), sqlc.arg(idempotency_key),
           sqlc.arg(identity_window_seconds)::float8, 'infinity'
    WHERE sqlc.arg(take_identity)::boolean AND EXISTS (SELECT 1 FROM res)
    ON CONFLICT (tenant, tool, identity) DO UPDATE SET
        operation_id = EXCLUDED.operation_id, idempotency_key = EXCLUDED.idempotency_key,
        window_seconds = EXCLUDED.window_seconds, free_at = 'infinity'
    WHERE identity_free(i.free_at, i.operation_id, i.window_seconds)
       OR i.idempotency_key = EXCLUDED.idempotency_key AND NOT EXISTS (SELECT 1 FROM operation o WHERE o.id = i.operation_id)
    RETURNING i.operation_id
), ins AS (
    INSERT INTO operation (id, tenant, tool, tool_version, idempotency_key, args, fingerprint, state,
                           prepared_by, approval_required, approval_ttl_ms, downstream_key, events, chain_head,
                           fence, attempts, lease_owner, lease_expires_at, next_reconcile_at, first_claimed_at,
                           approvals_needed, policy_digest, approval_rule, approvals, supersedes,
                           budget_names, budget_scopes, identity,
                           approval_decision, approval_decided_by, approval_decided_at, approval_expires_at, approval_fingerprint, approval_reason)
    SELECT sqlc.arg(id), sqlc.arg(tenant), sqlc.arg(tool), sqlc.arg(tool_version), sqlc.arg(idempotency_key), sqlc.arg(args), sqlc.arg(fingerprint),
            CASE WHEN sqlc.arg(claim)::boolean THEN sqlc.arg(claim_to)::text ELSE sqlc.arg(state)::text END,
            sqlc.arg(prepared_by), sqlc.arg(approval_required), sqlc.arg(approval_ttl_ms), sqlc.arg(downstream_key),
            CASE WHEN sqlc.arg(claim)::boolean THEN 2 ELSE 1 END,
            CASE WHEN sqlc.arg(claim)::boolean
                 THEN audit_link((SELECT h FROM prepared_link), sqlc.narg(claimed_doc)::bytea, 2, 1, 1, statement_timestamp(), sqlc.arg(claim_from)::text)
                 ELSE (SELECT h FROM prepared_link) END,
            CASE WHEN sqlc.arg(claim)::boolean THEN 1 ELSE 0 END,
            CASE WHEN sqlc.arg(claim)::boolean THEN 1 ELSE 0 END,
            CASE WHEN sqlc.arg(claim)::boolean THEN sqlc.narg(lease_owner)::text END,
            CASE WHEN sqlc.arg(claim)::boolean THEN now() + make_interval(secs => sqlc.arg(lease_seconds)::float8) END,
            CASE WHEN sqlc.arg(claim)::boolean THEN now() + make_interval(secs => sqlc.arg(lease_seconds)::float8) END,
            CASE WHEN sqlc.arg(claim)::boolean THEN now() END,
            sqlc.arg(approvals_needed)::integer, sqlc.arg(policy_digest)::text, sqlc.arg(approval_rule)::text,
            sqlc.arg(approvals)::jsonb, sqlc.narg(supersedes)::text,
            ARRAY[sqlc.arg(budget_name)::text], ARRAY[sqlc.arg(budget_scope)::text], sqlc.narg(identity)::text,
            -- An edit's operation is born with its editor's approval
            -- (approvals holds it): READY and in force for the TTL when it
            -- completes the quorum.
            CASE WHEN jsonb_array_length(sqlc.arg(approvals)::jsonb) > 0 THEN 'APPROVE' END,
            sqlc.narg(approved_by)::text,
            CASE WHEN jsonb_array_length(sqlc.arg(approvals)::jsonb) > 0 THEN now() END,
            CASE WHEN jsonb_array_length(sqlc.arg(approvals)::jsonb) > 0 AND sqlc.arg(state)::text = 'READY'
                 THEN now() + make_interval(secs => sqlc.arg(approval_ttl_ms)::bigint / 1000.0) END,
            CASE WHEN jsonb_array_length(sqlc.arg(approvals)::jsonb) > 0 THEN sqlc.arg(fingerprint)::text END,
            sqlc.narg(approved_reason)::text
    WHERE (NOT sqlc.arg(take_identity)::boolean OR EXISTS (SELECT 1 FROM ident))
      AND EXISTS (SELECT 1 FROM res)
    ON CONFLICT DO NOTHING
    RETURNING id, state, fence, created_at, lease_expires_at, args, chain_head
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash, facts)
    SELECT ins.id, 1, 'PREPARED', sqlc.arg(actor), NULL, sqlc.arg(state)::text, 0, 0, sqlc.arg(detail),
           (SELECT h FROM prepared_link),
           sqlc.narg(prepared_facts)::text FROM ins
), claimed AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash)
    SELECT ins.id, 2, sqlc.arg(claim_event)::text, sqlc.arg(actor), sqlc.arg(claim_from)::text, ins.state, 1, 1, '', ins.chain_head FROM ins WHERE ins.fence = 1
), note AS (
    INSERT INTO approval_notification (operation_id, seq, reason)
    SELECT ins.id, 1, 'prepared' FROM ins WHERE ins.state = 'AWAITING_APPROVAL' AND sqlc.arg(notify)::boolean
)
SELECT ins.created_at, ins.lease_expires_at, ins.args FROM ins
UNION ALL
SELECT NULL::timestamptz, NULL::timestamptz, NULL::jsonb
WHERE operation_admit_reserved(1, (SELECT count(*) FROM res),
                               sqlc.arg(take_identity)::boolean, (SELECT count(*) FROM ident), (SELECT count(*) FROM ins));

-- name: OperationGetByKey :one
SELECT * FROM operation
WHERE tenant = sqlc.arg(tenant) AND tool = sqlc.arg(tool) AND idempotency_key = sqlc.arg(idempotency_key);

-- name: OperationGet :one
-- db_now is the database's clock, against which the caller judges leases
-- and retention.
SELECT sqlc.embed(operation), now()::timestamptz AS db_now FROM operation
WHERE id = sqlc.arg(id) AND tenant IS NOT DISTINCT FROM sqlc.arg(tenant);

-- name: OperationGetForUpdate :one
SELECT * FROM operation
WHERE id = sqlc.arg(id) AND tenant IS NOT DISTINCT FROM sqlc.arg(tenant)
FOR UPDATE;

-- name: OperationEvents :many
SELECT * FROM operation_event
WHERE operation_id = sqlc.arg(operation_id)
ORDER BY seq;

-- name: OperationClaim :many
-- Claims an operation in from_state (the state machine's: READY) for the
-- caller: fence + 1, attempts + 1, and a lease measured on the
-- database's clock, with its event, in one statement. With
-- require_approval_in_force, an approval (if required) must be in force on
-- the database's clock, or consumed by a send (first_sent_fence is set: the
-- operation may have taken effect, and the next claim resubmits the same key
-- to learn the outcome); a claim that ends in a release (nothing sent) does
-- not consume the approval. With require_policy_current, an operation
-- that nothing was sent for must have been judged under one of
-- policy_digests, the policies this server holds current: one prepared (or
-- last judged) under another policy is not sent until it is judged again
-- (OperationPolicyApply), so a policy change reaches every operation not yet
-- sent. When the operation is not claimable the same
-- statement returns it as it is (claimed = false), so a replayed Execute
-- costs one round trip. That row comes from the statement's snapshot: if a
-- concurrent claim won, it may still read READY, and the caller simply tries
-- again. db_now is the database's clock, against which the caller judges the
-- lease and the approval it reads. Its clock is statement_timestamp(), as
-- its event's is: with the extended protocol a transaction (now()) starts
-- at the Bind, before the Execute, so a clock that steps between the two
-- would judge the approval at one instant and log the claim at another
-- (the chaos suite's database clock step found it).
WITH upd AS (
    UPDATE operation o SET
        state = sqlc.arg(to_state)::text,
        fence = o.fence + 1,
        attempts = o.attempts + 1,
        lease_owner = sqlc.arg(lease_owner),
        lease_expires_at = statement_timestamp() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        next_reconcile_at = statement_timestamp() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        first_claimed_at = COALESCE(o.first_claimed_at, statement_timestamp()),
        waited = false,
        events = o.events + 1,
        chain_head = audit_link(o.chain_head, sqlc.narg(doc)::bytea, o.events + 1, o.attempts + 1, o.fence + 1, statement_timestamp(), o.state),
        updated_at = statement_timestamp()
    WHERE o.id = sqlc.arg(id) AND o.tenant IS NOT DISTINCT FROM sqlc.arg(tenant) AND o.state = sqlc.arg(from_state)::text
      AND (NOT sqlc.arg(require_approval_in_force)::boolean OR NOT o.approval_required
           OR o.approval_expires_at > statement_timestamp() OR o.first_sent_fence IS NOT NULL)
      AND (NOT sqlc.arg(require_policy_current)::boolean OR o.first_sent_fence IS NOT NULL
           OR o.policy_digest = ANY (sqlc.arg(policy_digests)::text[]))
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash)
    SELECT upd.id, upd.events, sqlc.arg(event_type)::text, sqlc.arg(actor), sqlc.arg(from_state)::text, upd.state, upd.attempts, upd.fence, '', upd.chain_head FROM upd
)
SELECT upd.*, true AS claimed, statement_timestamp()::timestamptz AS db_now FROM upd
UNION ALL
SELECT g.*, false AS claimed, statement_timestamp()::timestamptz AS db_now FROM operation g
WHERE g.id = sqlc.arg(id) AND g.tenant IS NOT DISTINCT FROM sqlc.arg(tenant) AND NOT EXISTS (SELECT 1 FROM upd);

-- name: OperationClaimKnown :many
-- OperationClaim for a caller that holds the operation as it was (its
-- events counted): the same guarded claim and event, but it returns a row
-- only when it claimed, with only the columns the claim sets and those
-- that change without an event (first_sent_fence too: migration 0008 set
-- it without one), and the caller completes the row from its copy when
-- that copy is the version the claim changed (events one behind); it reads
-- the row when the claim did not take. Every column returned costs
-- PostgreSQL catalog lookups on every execution, and so does a branch that
-- would return the row unclaimed (docs/performance.md, findings 31 and 32).
WITH upd AS (
    UPDATE operation o SET
        state = sqlc.arg(to_state)::text,
        fence = o.fence + 1,
        attempts = o.attempts + 1,
        lease_owner = sqlc.arg(lease_owner),
        lease_expires_at = statement_timestamp() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        next_reconcile_at = statement_timestamp() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        first_claimed_at = COALESCE(o.first_claimed_at, statement_timestamp()),
        waited = false,
        events = o.events + 1,
        chain_head = audit_link(o.chain_head, sqlc.narg(doc)::bytea, o.events + 1, o.attempts + 1, o.fence + 1, statement_timestamp(), o.state),
        updated_at = statement_timestamp()
    WHERE o.id = sqlc.arg(id) AND o.tenant IS NOT DISTINCT FROM sqlc.arg(tenant) AND o.state = sqlc.arg(from_state)::text
      AND (NOT sqlc.arg(require_approval_in_force)::boolean OR NOT o.approval_required
           OR o.approval_expires_at > statement_timestamp() OR o.first_sent_fence IS NOT NULL)
      AND (NOT sqlc.arg(require_policy_current)::boolean OR o.first_sent_fence IS NOT NULL
           OR o.policy_digest = ANY (sqlc.arg(policy_digests)::text[]))
    RETURNING o.id, o.state, o.fence, o.attempts, o.lease_owner, o.lease_expires_at, o.next_reconcile_at,
              o.first_claimed_at, o.waited, o.reconcile_attempts, o.first_sent_fence, o.events, o.updated_at, o.chain_head
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash)
    SELECT upd.id, upd.events, sqlc.arg(event_type)::text, sqlc.arg(actor), sqlc.arg(from_state)::text, upd.state, upd.attempts, upd.fence, '', upd.chain_head FROM upd
)
SELECT state, fence, attempts, lease_owner, lease_expires_at, next_reconcile_at, first_claimed_at, waited, reconcile_attempts, first_sent_fence, events, updated_at, statement_timestamp()::timestamptz AS db_now FROM upd;

-- name: OperationTakeOver :one
-- Takes over an operation in from_state (the state machine's: EXECUTING)
-- whose lease expired on the database's clock, if its fence is still the
-- one the caller read (only for downstreams that dedupe keys): the old
-- holder's fence becomes stale, and since it may have sent, the operation
-- counts as sent. With a key retention (seconds, 0 = never forgets), the
-- takeover's request, which may reach the downstream as late as
-- ahead_seconds from now, must arrive within key_window_factor of the retention counted
-- from the first claim.
WITH upd AS (
    UPDATE operation o SET
        fence = o.fence + 1,
        first_sent_fence = COALESCE(o.first_sent_fence, o.fence),
        attempts = o.attempts + 1,
        lease_owner = sqlc.arg(lease_owner),
        lease_expires_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        next_reconcile_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8),
        events = o.events + 1,
        chain_head = audit_link(o.chain_head, sqlc.narg(doc)::bytea, o.events + 1, o.attempts + 1, o.fence + 1, statement_timestamp(), o.state),
        updated_at = now()
    WHERE o.id = sqlc.arg(id) AND o.tenant IS NOT DISTINCT FROM sqlc.arg(tenant) AND o.state = sqlc.arg(from_state)::text
      AND o.fence = sqlc.arg(fence) AND o.lease_expires_at < now()
      AND (sqlc.arg(key_retention_seconds)::float8 = 0 OR o.first_claimed_at IS NULL
           OR now() + make_interval(secs => sqlc.arg(ahead_seconds)::float8)
              < o.first_claimed_at + make_interval(secs => sqlc.arg(key_window_factor)::float8 * sqlc.arg(key_retention_seconds)::float8))
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash)
    SELECT upd.id, upd.events, sqlc.arg(event_type)::text, sqlc.arg(actor), sqlc.arg(from_state)::text, upd.state, upd.attempts, upd.fence,
           'lease expired; previous holder fenced out', upd.chain_head FROM upd
)
SELECT * FROM upd;

-- name: OperationTransition :one
-- The one guarded transition for outcomes, reconciliation and cancellation:
-- moves the operation from one of from_states to to_state only if its fence
-- is still the caller's and every condition the caller asks for holds, on
-- the database's clock, in this statement:
--   require_lease_expired: an EXECUTING operation's lease has expired;
--   require_unsent:        nothing may have reached the downstream yet;
--   require_sent_if_ready: a READY operation was sent before (only then can
--                          the downstream report an outcome of it);
--   require_first_send:    no earlier attempt than the current fence may have
--                          reached it (a refusal of a later attempt proves
--                          nothing about an earlier one);
--   key_retention_seconds: (when > 0) a resubmission decided now, reaching the
--                          downstream within ahead_seconds, still falls
--                          inside key_window_factor (the ledger's send rule)
--                          of the downstream's key retention
--                          counted from the first claim.
-- An attempt that ends any other way than a release (RELEASED: nothing was
-- sent) marks the operation as sent. The event is appended in the same
-- statement, from the state the update found (prev_state, which the table's
-- trigger sets from the locked row). A caller whose guard fails changes
-- nothing and gets no row. Returns the columns the statement sets from the
-- row or the clock, and those that change without an event (waited,
-- reconcile_attempts, next_reconcile_at); the store completes the row from
-- the caller's copy when events shows it is the version changed here
-- (Transition.Base). Its clock is statement_timestamp(): a webhook runs it
-- in a transaction after locking the row, and now() would be the time
-- before that wait (for a statement of its own the two are the same).
WITH upd AS (
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
                                 THEN statement_timestamp() + make_interval(secs => sqlc.arg(reconcile_after_seconds)::float8)
                                 ELSE NULL END,
        reconcile_attempts = CASE WHEN sqlc.arg(to_state)::text = 'OUTCOME_UNKNOWN' THEN o.reconcile_attempts ELSE 0 END,
        events = o.events + 1,
        chain_head = audit_link(o.chain_head, sqlc.narg(doc)::bytea, o.events + 1, o.attempts, o.fence, statement_timestamp(), o.state),
        updated_at = statement_timestamp()
    WHERE o.id = sqlc.arg(id) AND o.tenant IS NOT DISTINCT FROM sqlc.arg(tenant)
      AND o.state = ANY (sqlc.arg(from_states)::text[])
      AND o.fence = sqlc.arg(fence)
      AND (NOT sqlc.arg(require_lease_expired)::boolean OR o.state <> 'EXECUTING' OR o.lease_expires_at < statement_timestamp())
      AND (NOT sqlc.arg(require_unsent)::boolean OR o.first_sent_fence IS NULL)
      AND (NOT sqlc.arg(require_sent_if_ready)::boolean OR o.state <> 'READY' OR o.first_sent_fence IS NOT NULL)
      AND (NOT sqlc.arg(require_first_send)::boolean OR o.first_sent_fence IS NULL OR o.first_sent_fence = o.fence)
      AND (sqlc.arg(key_retention_seconds)::float8 = 0 OR o.first_claimed_at IS NULL
           OR statement_timestamp() + make_interval(secs => sqlc.arg(ahead_seconds)::float8)
              < o.first_claimed_at + make_interval(secs => sqlc.arg(key_window_factor)::float8 * sqlc.arg(key_retention_seconds)::float8))
    RETURNING o.id, o.attempts, o.fence, o.state, o.prev_state, o.events, o.updated_at, o.waited, o.reconcile_attempts,
              o.next_reconcile_at, o.first_sent_fence, o.external_ref, o.result, o.error, o.chain_head
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash, facts)
    SELECT upd.id, upd.events, sqlc.arg(event_type)::text, sqlc.arg(actor), upd.prev_state, upd.state, upd.attempts, upd.fence, sqlc.arg(detail),
           upd.chain_head, sqlc.narg(facts)::text
    FROM upd
)
SELECT events, updated_at, waited, reconcile_attempts, next_reconcile_at, first_sent_fence, external_ref, result, error FROM upd;

-- name: OperationDecide :one
-- Records an approver's decision (or an approval's expiry) on an operation
-- in one of from_states. With require_lapsed_unsent (an expiry, a renewal of
-- a lapsed approval, a denial of a READY operation), a READY operation's
-- approval must also have lapsed on the database's clock and nothing may
-- have been sent: otherwise
-- an Execute that read a lapsed approval could wipe a renewal committed just
-- after that read, or a stalled one could send an operation that may have
-- taken effect back to AWAITING_APPROVAL, where a denial would make it
-- REJECTED with an effect behind it. An expiry with notify also queues the
-- approval notification, in the same statement. Its clock is
-- statement_timestamp(), not now(): Approve runs it in a transaction after
-- locking the row, and now() is when that transaction began, before any
-- wait for the lock, so a decision that waited past the approval's end
-- would have judged it still in force. Its event carries the same time (the
-- column's default since migration 0013), so that the log shows the
-- approval given when its window began.
--
-- A decision is appended to approvals (the current round's decisions; an
-- expiry, and an approval of a READY operation whose approval lapsed, start
-- a new round), never twice for the same principal in a round; an approval
-- makes the operation READY exactly when it completes the quorum
-- (approvals_needed, as the caller judged it under the current policy with
-- the row locked): to_state READY with fewer approvals, or
-- AWAITING_APPROVAL with enough, changes nothing. The approval window
-- (approval_ttl_ms) runs from the approval that completes the quorum.
WITH upd AS (
    UPDATE operation o SET
        state = sqlc.arg(to_state)::text,
        approval_decision = sqlc.narg(decision)::text,
        approval_decided_by = sqlc.narg(decided_by)::text,
        approval_decided_at = CASE WHEN sqlc.narg(decision)::text IS NULL THEN NULL ELSE statement_timestamp() END,
        approval_expires_at = CASE WHEN sqlc.narg(decision)::text = 'APPROVE' AND sqlc.arg(to_state)::text = 'READY'
                                   THEN statement_timestamp() + make_interval(secs => COALESCE(sqlc.narg(approval_ttl_ms)::bigint, o.approval_ttl_ms) / 1000.0)
                                   ELSE NULL END,
        approval_ttl_ms = COALESCE(sqlc.narg(approval_ttl_ms)::bigint, o.approval_ttl_ms),
        approval_fingerprint = sqlc.narg(approved_fingerprint)::text,
        approval_reason = sqlc.narg(reason)::text,
        approvals_needed = COALESCE(sqlc.narg(approvals_needed)::integer, o.approvals_needed),
        policy_digest = COALESCE(sqlc.narg(policy_digest)::text, o.policy_digest),
        approval_rule = COALESCE(sqlc.narg(approval_rule)::text, o.approval_rule),
        superseded_by = COALESCE(sqlc.narg(superseded_by)::text, o.superseded_by),
        approvals = CASE
            WHEN sqlc.narg(decision)::text IS NULL THEN '[]'::jsonb
            ELSE (CASE WHEN o.state = 'READY' THEN '[]'::jsonb ELSE o.approvals END)
                 || jsonb_build_array(jsonb_build_object(
                        'principal_id', sqlc.narg(decided_by)::text, 'principal_name', sqlc.arg(decided_by_name)::text,
                        'decision', sqlc.narg(decision)::text, 'decided_at', statement_timestamp(),
                        'fingerprint', sqlc.narg(approved_fingerprint)::text, 'reason', COALESCE(sqlc.narg(reason)::text, ''),
                        'policy_digest', COALESCE(sqlc.narg(policy_digest)::text, o.policy_digest)))
            END,
        events = o.events + 1,
        chain_head = audit_link(o.chain_head, sqlc.narg(doc)::bytea, o.events + 1, o.attempts, o.fence, statement_timestamp(), o.state),
        updated_at = statement_timestamp()
    WHERE o.id = sqlc.arg(id) AND o.tenant IS NOT DISTINCT FROM sqlc.arg(tenant) AND o.state = ANY (sqlc.arg(from_states)::text[])
      AND (NOT sqlc.arg(require_lapsed_unsent)::boolean OR o.state <> 'READY'
           OR (o.approval_expires_at <= statement_timestamp() AND o.first_sent_fence IS NULL))
      AND (sqlc.narg(decision)::text IS NULL OR o.state = 'READY'
           OR NOT o.approvals @> jsonb_build_array(jsonb_build_object('principal_id', sqlc.narg(decided_by)::text)))
      AND (sqlc.narg(decision)::text IS DISTINCT FROM 'APPROVE'
           OR (sqlc.arg(to_state)::text = 'READY') = ((CASE WHEN o.state = 'READY' THEN 0 ELSE jsonb_array_length(o.approvals) END) + 1
                                                      >= COALESCE(sqlc.narg(approvals_needed)::integer, o.approvals_needed)))
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash, facts)
    SELECT upd.id, upd.events, sqlc.arg(event_type)::text, sqlc.arg(actor), upd.prev_state, upd.state, upd.attempts, upd.fence, sqlc.arg(detail),
           upd.chain_head, sqlc.narg(facts)::text
    FROM upd
), note AS (
    INSERT INTO approval_notification (operation_id, seq, reason)
    SELECT upd.id, upd.events, 'approval_expired' FROM upd
    WHERE upd.state = 'AWAITING_APPROVAL' AND sqlc.arg(notify)::boolean
)
SELECT * FROM upd;

-- name: OperationPolicyApply :one
-- Applies the policy in force to an operation that nothing was sent for and
-- that was last judged under another one (old_digest): the policy's
-- judgement, made by the caller from the operation's arguments (which never
-- change), is to_state with its event:
--   REJECTED:          a deny rule holds;
--   AWAITING_APPROVAL: it demands more approvals (approvals_needed, or the
--                      quorum the operation had, whichever is more) than
--                      the operation has (require_short), which it then
--                      waits for; approvals still in force keep counting;
--   the same state:    it demands no more than it has (require_met); the
--                      operation is now judged under policy_digest.
-- The quorum only grows: a weaker policy never lowers what an operation
-- already awaits. Guarded by old_digest and by nothing having been sent, on
-- the row this statement updates, so two servers judging the same change
-- apply it once. With notify, an operation sent back to AWAITING_APPROVAL
-- queues its approval notification.
WITH upd AS (
    UPDATE operation o SET
        state = sqlc.arg(to_state)::text,
        policy_digest = sqlc.arg(policy_digest)::text,
        approval_required = o.approval_required OR sqlc.arg(approvals_needed)::integer > 0,
        approval_ttl_ms = CASE WHEN sqlc.arg(approvals_needed)::integer > o.approvals_needed THEN sqlc.arg(approval_ttl_ms)::bigint ELSE o.approval_ttl_ms END,
        approval_rule = CASE WHEN sqlc.arg(approvals_needed)::integer > o.approvals_needed THEN sqlc.arg(approval_rule)::text ELSE o.approval_rule END,
        approvals_needed = GREATEST(o.approvals_needed, sqlc.arg(approvals_needed)::integer),
        approvals = CASE WHEN sqlc.arg(to_state)::text = 'AWAITING_APPROVAL' AND o.approval_expires_at <= statement_timestamp()
                         THEN '[]'::jsonb ELSE o.approvals END,
        approval_expires_at = CASE WHEN sqlc.arg(to_state)::text = 'AWAITING_APPROVAL' THEN NULL ELSE o.approval_expires_at END,
        events = o.events + 1,
        chain_head = audit_link(o.chain_head, sqlc.narg(doc)::bytea, o.events + 1, o.attempts, o.fence, statement_timestamp(), o.state),
        updated_at = statement_timestamp()
    WHERE o.id = sqlc.arg(id) AND o.tenant IS NOT DISTINCT FROM sqlc.arg(tenant) AND o.state = ANY (sqlc.arg(from_states)::text[])
      AND o.policy_digest = sqlc.arg(old_digest)::text AND o.first_sent_fence IS NULL
      AND (NOT sqlc.arg(require_short)::boolean
           OR jsonb_array_length(o.approvals) < GREATEST(o.approvals_needed, sqlc.arg(approvals_needed)::integer))
      AND (NOT sqlc.arg(require_met)::boolean
           OR jsonb_array_length(o.approvals) >= GREATEST(o.approvals_needed, sqlc.arg(approvals_needed)::integer))
    RETURNING o.*
), ev AS (
    INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail, hash, facts)
    SELECT upd.id, upd.events, sqlc.arg(event_type)::text, sqlc.arg(actor), upd.prev_state, upd.state, upd.attempts, upd.fence, sqlc.arg(detail),
           upd.chain_head, sqlc.narg(facts)::text
    FROM upd
), note AS (
    INSERT INTO approval_notification (operation_id, seq, reason)
    SELECT upd.id, upd.events, 'policy_changed' FROM upd
    WHERE upd.state = 'AWAITING_APPROVAL' AND upd.prev_state <> 'AWAITING_APPROVAL' AND sqlc.arg(notify)::boolean
)
SELECT * FROM upd;

-- name: OperationNotify :exec
-- Notifies every replica's waiters that the operation's attempt ended, when
-- the transaction commits: for a transition that ends an attempt whose
-- holder is not the one writing it (a webhook), since a waiter on the
-- holder's replica relies on the holder to wake it and never asked the
-- trigger to notify (OperationMarkWaited).
SELECT pg_notify('opledger_operation', sqlc.arg(id)::text);

-- name: OperationMarkWaited :execrows
-- Records that an Execute waits for the outcome of the attempt holding
-- fence, so that the statement recording it notifies (migration 0009). No
-- row: the attempt already ended (or another took over); read again.
UPDATE operation SET waited = true
WHERE id = sqlc.arg(id) AND tenant IS NOT DISTINCT FROM sqlc.arg(tenant) AND state IS NOT DISTINCT FROM 'EXECUTING' AND fence = sqlc.arg(fence);

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
-- The backoff's 2^attempts is capped before it is taken: 2^1024 overflows
-- float8 and would fail the whole batch of every replica for good.
UPDATE operation o SET
    reconcile_attempts = o.reconcile_attempts + 1,
    next_reconcile_at = now() + make_interval(secs => LEAST(sqlc.arg(max_backoff_seconds)::float8,
                                                           sqlc.arg(base_backoff_seconds)::float8 * power(2, LEAST(o.reconcile_attempts, 62))))
FROM due
WHERE o.id = due.id
RETURNING sqlc.embed(o), now()::timestamptz AS db_now;

-- name: OperationCountOpen :many
-- Counts open (non-terminal) operations by state, across tenants, through
-- the operation_open partial index.
SELECT state, count(*)::bigint AS n FROM operation
WHERE state IN ('AWAITING_APPROVAL', 'READY', 'EXECUTING', 'OUTCOME_UNKNOWN')
GROUP BY state;

-- name: OperationPrune :one
-- Deletes up to batch_size finished operations last changed before the
-- cutoff, their events and the heads their last checkpoint committed to
-- (audit_head; the log's leaves stay), and returns how many operations it
-- deleted.
-- Open and OUTCOME_UNKNOWN operations are never pruned. SKIP LOCKED lets
-- replicas prune side by side. An identity whose operation took effect
-- outlives it for the rest of its window (migration 0022): the prune writes
-- its end (free_at) where identity_free read it from the operation. The
-- identities are locked before the operations are deleted: a Prepare that
-- holds one (a replay of the key at the retention's age) then meets its
-- operation still there, not being deleted, and finishes without waiting
-- for the prune, which would otherwise wait for it in turn.
WITH doomed AS (
    SELECT p.id, p.tenant, p.tool, p.identity, p.state, p.updated_at FROM operation p
    WHERE p.state IN ('SUCCEEDED', 'FAILED', 'REJECTED', 'CANCELLED')
      AND p.updated_at < now() - make_interval(secs => sqlc.arg(older_than_seconds)::float8)
    ORDER BY p.updated_at
    LIMIT sqlc.arg(batch_size)
    FOR UPDATE SKIP LOCKED
), held AS (
    SELECT i.tenant, i.tool, i.identity, d.updated_at + make_interval(secs => i.window_seconds) AS free_at
    FROM operation_identity i JOIN doomed d
      ON i.tenant = d.tenant AND i.tool = d.tool AND i.identity = d.identity AND i.operation_id = d.id
    WHERE d.state = 'SUCCEEDED' AND i.free_at = 'infinity'
    FOR UPDATE OF i
), gone AS (
    DELETE FROM operation
    WHERE id IN (SELECT doomed.id FROM doomed) AND (SELECT count(*) FROM held) >= 0
    RETURNING id
), identities AS (
    UPDATE operation_identity i SET free_at = held.free_at
    FROM held
    WHERE i.tenant = held.tenant AND i.tool = held.tool AND i.identity = held.identity
), events AS (
    DELETE FROM operation_event e USING gone WHERE e.operation_id = gone.id
), heads AS (
    DELETE FROM audit_head h USING gone WHERE h.operation_id = gone.id
)
SELECT count(*)::bigint AS deleted FROM gone;

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

-- name: WebhookEventPrune :execrows
-- Forgets up to batch_size webhook events received before the cutoff, the
-- oldest first. Deduplication needs an event only while its sender may
-- still deliver it again; a delivery after that is applied through the same
-- guarded transition as any other, and changes a finished operation as
-- little. SKIP LOCKED lets replicas prune side by side.
DELETE FROM webhook_event
WHERE (tool, id) IN (
    SELECT w.tool, w.id FROM webhook_event w
    WHERE w.received_at < now() - make_interval(secs => sqlc.arg(older_than_seconds)::float8)
    ORDER BY w.received_at
    LIMIT sqlc.arg(batch_size)
    FOR UPDATE SKIP LOCKED
);

-- name: OperationList :many
-- A page of a tenant's operations in the given states, newest first, older
-- than the cursor (before_time, before_id). Each state is read through the
-- operation_list index backwards from the cursor and stops after page_limit
-- rows, so a page costs at most states × page_limit index entries however
-- many operations the tenant has; the outer sort only merges those. The tool
-- filter is checked on the rows the index yields.
SELECT o.* FROM unnest(sqlc.arg(states)::text[]) AS s(state)
CROSS JOIN LATERAL (
    SELECT l.* FROM operation l
    WHERE l.tenant = sqlc.arg(tenant) AND l.state = s.state
      AND (sqlc.arg(tool)::text = '' OR l.tool = sqlc.arg(tool)::text)
      AND (l.created_at, l.id) < (sqlc.arg(before_time)::timestamptz, sqlc.arg(before_id)::text)
    ORDER BY l.created_at DESC, l.id DESC
    LIMIT sqlc.arg(page_limit)
) o
ORDER BY o.created_at DESC, o.id DESC
LIMIT sqlc.arg(page_limit);

-- name: OperationListApprovedUnsent :many
-- A page of a tenant's READY operations that needed an approval and have
-- sent nothing yet (approvals not executed yet, and lapsed ones), newest
-- first, older than the cursor, read backwards through the
-- operation_approved_unsent partial index, which holds only those rows.
SELECT * FROM operation l
WHERE l.tenant = sqlc.arg(tenant) AND l.state = 'READY' AND l.approval_required AND l.first_sent_fence IS NULL
  AND (sqlc.arg(tool)::text = '' OR l.tool = sqlc.arg(tool)::text)
  AND (l.created_at, l.id) < (sqlc.arg(before_time)::timestamptz, sqlc.arg(before_id)::text)
ORDER BY l.created_at DESC, l.id DESC
LIMIT sqlc.arg(page_limit);

-- name: ClockNow :one
-- The database's clock, for a time rule judged outside a statement that
-- writes (a webhook signature's age; an approval in force, with the row
-- locked, in Approve). statement_timestamp(), not now(): in a transaction
-- that waited for a row lock, now() is the time before that wait.
SELECT statement_timestamp()::timestamptz AS now;

-- name: BudgetReserve :one
-- Reserves an operation's share of each of its budgets (limits of the
-- tenant, each for one `per` key; sorted by name), all or none, by
-- budget_reserve (migration 0016): {refused, over}, the 0-based index of the
-- budget that refused (nothing reserved) and of the first one taken past its
-- limit by force (`over: approve`), -1 for none. Each budget's row lock
-- orders concurrent reservations and the check runs on what the previous
-- holder committed, so reservations never together exceed a limit. With
-- renew (an approval renewing a lapsed one) a share the operation holds
-- already is admitted as it is. With async, call it on the pool (a transaction of its own): it commits
-- without waiting for the flush, so the lock is held for microseconds.
SELECT budget_reserve(sqlc.arg(tenant)::text, sqlc.arg(op_id)::text, sqlc.arg(names)::text[], sqlc.arg(scopes)::text[],
                      sqlc.arg(amounts)::float8[], sqlc.arg(max_counts)::integer[], sqlc.arg(has_sums)::boolean[],
                      sqlc.arg(max_sums)::float8[], sqlc.arg(windows)::float8[], sqlc.arg(forces)::boolean[],
                      sqlc.arg(max_uses)::integer, sqlc.arg(async)::boolean, sqlc.arg(renew)::boolean)::integer[] AS outcome;

-- name: BudgetReserveEach :one
-- Reserves the share of each of several operations (op_ids, amounts) in one
-- budget of the tenant under one limit's bounds, judged in the order given
-- on the locked budget, by budget_reserve_each (migration 0023): per
-- operation 0 (refused), 1 (taken) or 2 (taken past the limit by force).
-- Call it on the pool (a transaction of its own): it commits without
-- waiting for the flush.
SELECT budget_reserve_each(sqlc.arg(tenant)::text, sqlc.arg(name)::text, sqlc.arg(scope)::text, sqlc.arg(op_ids)::text[],
                           sqlc.arg(amounts)::float8[], sqlc.arg(max_count)::integer, sqlc.arg(has_sum)::boolean,
                           sqlc.arg(max_sum)::float8, sqlc.arg(window_seconds)::float8, sqlc.arg(force)::boolean,
                           sqlc.arg(max_uses)::integer)::smallint[] AS outcome;

-- name: BudgetRelease :exec
-- Takes an operation's shares out of its budgets (operation_release_budgets):
-- a Prepare whose reservation committed but whose operation was not stored.
SELECT operation_release_budgets(sqlc.arg(op_id)::text, sqlc.arg(tenant)::text, sqlc.arg(names)::text[], sqlc.arg(scopes)::text[]);

-- name: BudgetGet :one
-- A budget's uses within the window, oldest first, and the database's
-- clock (epoch seconds) they were judged on: what is used, and when room
-- frees up. Read only; it decides nothing.
SELECT COALESCE((SELECT jsonb_agg(jsonb_build_object('op', u.operation_id, 'at', extract(epoch FROM u.at)::float8,
                                                     'amount', u.amount::float8) ORDER BY u.at)
                 FROM budget_use u
                 WHERE u.tenant = sqlc.arg(tenant)::text AND u.name = sqlc.arg(name)::text AND u.scope = sqlc.arg(scope)::text
                   AND u.at > statement_timestamp() - make_interval(secs => sqlc.arg(window_seconds)::float8)), '[]'::jsonb)::jsonb AS uses,
       extract(epoch FROM statement_timestamp())::float8 AS now;

-- name: IdentityReserve :one
-- Takes a business identity of a tool for an operation, unless another
-- operation under another idempotency key holds it: one live, or one that
-- took effect less than its window ago. The holder's own key takes it over
-- (a replay or twin, whose insert then conflicts and rolls this back; or
-- the same call after the holder's row was pruned). No row: it is held
-- (IdentityHolder says by which operation). The row lock orders concurrent
-- Prepares of one identity, and the WHERE is judged on its newest version;
-- the caller commits it with the operation.
INSERT INTO operation_identity AS i (tenant, tool, identity, operation_id, idempotency_key, window_seconds, free_at)
VALUES (sqlc.arg(tenant), sqlc.arg(tool), sqlc.arg(identity), sqlc.arg(operation_id), sqlc.arg(idempotency_key), sqlc.arg(window_seconds), 'infinity')
ON CONFLICT (tenant, tool, identity) DO UPDATE SET
    operation_id = EXCLUDED.operation_id, idempotency_key = EXCLUDED.idempotency_key,
    window_seconds = EXCLUDED.window_seconds, free_at = 'infinity'
WHERE identity_free(i.free_at, i.operation_id, i.window_seconds) OR i.idempotency_key = EXCLUDED.idempotency_key
RETURNING i.operation_id;

-- name: IdentityHolder :one
-- The operation holding a business identity.
SELECT i.operation_id FROM operation_identity i
WHERE i.tenant = sqlc.arg(tenant) AND i.tool = sqlc.arg(tool) AND i.identity = sqlc.arg(identity);

-- name: BudgetPrune :one
-- Drops the uses that left their window from up to batch_size budgets and
-- deletes the budgets left with none (budget_prune, migration 0016); SKIP
-- LOCKED leaves a budget being reserved to its reservation. Returns the
-- budgets deleted.
SELECT budget_prune(sqlc.arg(batch_size)::integer)::bigint AS deleted;

-- name: IdentityPrune :execrows
-- Deletes up to batch_size business identities whose free_at has passed
-- (their operation ended without effect, or took effect longer than the
-- window ago and was pruned: migration 0022): a Prepare of one starts it
-- afresh, as it would take it over. One whose operation took effect and is
-- still stored waits for that operation's prune, which writes its free_at.
DELETE FROM operation_identity
WHERE (tenant, tool, identity) IN (
    SELECT p.tenant, p.tool, p.identity FROM operation_identity p
    WHERE p.free_at < statement_timestamp()
    LIMIT sqlc.arg(batch_size)
    FOR UPDATE SKIP LOCKED
);

-- name: IdentityGet :one
-- A business identity's row as it is: its holder, the holder's key and
-- whether it is held now (live, or took effect less than its window ago).
-- Read only; it decides nothing. Only the chaos suite's identity-select
-- control run (failpoints builds) decides on it, to prove that the checker
-- catches an identity checked by a read.
SELECT i.operation_id, i.idempotency_key, (NOT identity_free(i.free_at, i.operation_id, i.window_seconds))::boolean AS held
FROM operation_identity i
WHERE i.tenant = sqlc.arg(tenant) AND i.tool = sqlc.arg(tool) AND i.identity = sqlc.arg(identity);

-- name: IdentityTake :exec
-- Takes a business identity for an operation whoever holds it: no guard.
-- Only the chaos suite's identity-select control run (failpoints builds)
-- uses it, after IdentityGet, as a ledger that checked the identity by a
-- read would; IdentityReserve is the guarded statement.
INSERT INTO operation_identity AS i (tenant, tool, identity, operation_id, idempotency_key, window_seconds, free_at)
VALUES (sqlc.arg(tenant), sqlc.arg(tool), sqlc.arg(identity), sqlc.arg(operation_id), sqlc.arg(idempotency_key), sqlc.arg(window_seconds), 'infinity')
ON CONFLICT (tenant, tool, identity) DO UPDATE SET
    operation_id = EXCLUDED.operation_id, idempotency_key = EXCLUDED.idempotency_key,
    window_seconds = EXCLUDED.window_seconds, free_at = 'infinity';
