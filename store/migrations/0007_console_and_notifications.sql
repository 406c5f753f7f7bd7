-- 0007_console_and_notifications: the approval console's server-side
-- sessions, and the outbox of approval notifications.

-- A console sign-in: the cookie carries a random token, the table only its
-- SHA-256 (like API keys), with the principal it acts as and the session's
-- CSRF token. Sessions live in the database so that any replica serves any
-- request; revoking the principal ends its sessions at once.
CREATE TABLE console_session (
    id_hash      bytea PRIMARY KEY,
    principal_id text NOT NULL REFERENCES principal (id),
    csrf_token   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX console_session_expiry ON console_session (expires_at);

-- One row per time an operation started awaiting approval (its event seq),
-- written by the same statement that creates the operation (or moves it
-- back after its approval expired), so a crash can never lose one. Each
-- replica's dispatcher claims due rows with SKIP LOCKED, sends them, and
-- deletes them once the receiver acknowledged.
CREATE TABLE approval_notification (
    operation_id    text NOT NULL REFERENCES operation (id) ON DELETE CASCADE,
    seq             integer NOT NULL,
    reason          text NOT NULL CHECK (reason IN ('prepared', 'approval_expired')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation_id, seq)
);
CREATE INDEX approval_notification_due ON approval_notification (next_attempt_at);
