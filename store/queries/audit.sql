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
