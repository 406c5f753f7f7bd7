-- name: ConsoleSessionCreate :exec
-- Opens a console session (and forgets every expired one, through the
-- expiry index).
WITH gone AS (
    DELETE FROM console_session WHERE expires_at < now()
)
INSERT INTO console_session (id_hash, principal_id, csrf_token, expires_at)
VALUES (sqlc.arg(id_hash), sqlc.arg(principal_id), sqlc.arg(csrf_token),
        now() + make_interval(secs => sqlc.arg(idle_seconds)::float8));

-- name: ConsoleSessionTouch :one
-- Returns a live session's principal and CSRF token and, with extend (a
-- person's request, not a page reloading itself), extends its idle expiry,
-- never past its absolute lifetime, on the database's clock. An expired
-- session, or one whose principal was revoked, returns no row.
UPDATE console_session s SET
    expires_at = CASE WHEN sqlc.arg(extend)::boolean
                      THEN LEAST(s.created_at + make_interval(secs => sqlc.arg(max_seconds)::float8),
                                 now() + make_interval(secs => sqlc.arg(idle_seconds)::float8))
                      ELSE s.expires_at END
FROM principal p
WHERE s.id_hash = sqlc.arg(id_hash) AND s.expires_at > now()
  AND p.id = s.principal_id AND p.revoked_at IS NULL
RETURNING p.id, p.tenant, p.name, p.roles, s.csrf_token, s.expires_at;

-- name: ConsoleSessionDelete :exec
DELETE FROM console_session WHERE id_hash = sqlc.arg(id_hash);

-- name: ApprovalNotificationClaim :many
-- Hands up to batch_size due notifications to one dispatcher, skipping rows
-- another replica holds, and pushes each one's next attempt past the lease,
-- so no other replica sends it meanwhile; a dispatcher that dies mid-send
-- leaves its rows to be sent again once the lease ends (delivery is at
-- least once; receivers dedupe by the notification id). The operation's
-- current state comes along: one no longer awaiting approval need not be
-- announced.
WITH due AS (
    SELECT d.operation_id, d.seq FROM approval_notification d
    WHERE d.next_attempt_at <= now()
    ORDER BY d.next_attempt_at
    LIMIT sqlc.arg(batch_size)
    FOR UPDATE SKIP LOCKED
)
UPDATE approval_notification n SET
    attempts = n.attempts + 1,
    next_attempt_at = now() + make_interval(secs => sqlc.arg(lease_seconds)::float8)
FROM due, operation o
WHERE n.operation_id = due.operation_id AND n.seq = due.seq AND o.id = n.operation_id
RETURNING n.operation_id, n.seq, n.reason, n.attempts, n.created_at, o.tenant, o.state, now()::timestamptz AS db_now;

-- name: ApprovalNotificationDelete :exec
DELETE FROM approval_notification WHERE operation_id = sqlc.arg(operation_id) AND seq = sqlc.arg(seq);

-- name: ApprovalNotificationRetry :exec
-- Schedules the next attempt after a failed one, unless another dispatcher
-- claimed the row since (its attempt count moved on).
UPDATE approval_notification SET
    next_attempt_at = now() + make_interval(secs => sqlc.arg(backoff_seconds)::float8),
    last_error = sqlc.arg(last_error)
WHERE operation_id = sqlc.arg(operation_id) AND seq = sqlc.arg(seq) AND attempts = sqlc.arg(attempts);
