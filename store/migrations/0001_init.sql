-- 0001_init: principals, operations and their event log.

CREATE TABLE principal (
    id          text PRIMARY KEY,
    tenant      text NOT NULL,
    name        text NOT NULL,
    roles       text[] NOT NULL CHECK (roles <@ ARRAY['agent', 'approver', 'operator']::text[] AND cardinality(roles) > 0),
    -- SHA-256 of the API key; the key itself is never stored.
    key_hash    bytea NOT NULL UNIQUE,
    key_prefix  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    UNIQUE (tenant, name)
);

CREATE TABLE operation (
    id                   text PRIMARY KEY,
    tenant               text NOT NULL,
    tool                 text NOT NULL,
    tool_version         text NOT NULL,
    idempotency_key      text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    args                 jsonb NOT NULL,
    fingerprint          text NOT NULL,
    state                text NOT NULL CHECK (state IN ('AWAITING_APPROVAL', 'READY', 'EXECUTING', 'SUCCEEDED',
                                                        'FAILED', 'OUTCOME_UNKNOWN', 'REJECTED', 'CANCELLED')),
    prepared_by          text NOT NULL,
    approval_required    boolean NOT NULL,
    approval_ttl_ms      bigint NOT NULL DEFAULT 0,
    approval_decision    text CHECK (approval_decision IN ('APPROVE', 'DENY')),
    approval_decided_by  text,
    approval_decided_at  timestamptz,
    approval_expires_at  timestamptz,
    approval_fingerprint text,
    approval_reason      text,
    attempts             integer NOT NULL DEFAULT 0,
    fence                bigint NOT NULL DEFAULT 0,
    lease_owner          text,
    lease_expires_at     timestamptz,
    -- When the downstream may first have seen the downstream key: a lookup
    -- miss after the downstream's key retention is not trustworthy.
    first_claimed_at     timestamptz,
    downstream_key       text NOT NULL,
    external_ref         text,
    result               jsonb,
    error                jsonb,
    -- Number of events appended so far; the next event's seq is events + 1.
    -- Bumped by the same UPDATE that changes the state, so the row lock
    -- orders the log.
    events               integer NOT NULL DEFAULT 0,
    reconcile_attempts   integer NOT NULL DEFAULT 0,
    next_reconcile_at    timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    -- The business identity of an operation: one per (tenant, tool, key).
    CONSTRAINT operation_idempotency UNIQUE (tenant, tool, idempotency_key),
    CONSTRAINT operation_executing_has_lease CHECK (state <> 'EXECUTING' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- The reconciler's work queue: only unresolved operations are indexed.
CREATE INDEX operation_unresolved ON operation (next_reconcile_at)
    WHERE state IN ('EXECUTING', 'OUTCOME_UNKNOWN');

CREATE TABLE operation_event (
    operation_id text NOT NULL REFERENCES operation (id) ON DELETE CASCADE,
    seq          integer NOT NULL,
    type         text NOT NULL,
    actor        text NOT NULL,
    from_state   text,
    to_state     text NOT NULL,
    attempt      integer NOT NULL,
    fence        bigint NOT NULL,
    detail       text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation_id, seq)
);

-- Wakes Execute calls waiting on an operation (LISTEN opledger_operation) on
-- every state change, whichever server made it.
CREATE FUNCTION operation_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('opledger_operation', NEW.id);
    RETURN NULL;
END;
$$;

CREATE TRIGGER operation_state_changed
    AFTER UPDATE OF state ON operation
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION operation_notify();
