-- 0022_identity_effect_from_operation: an identity whose operation took
-- effect is held for its window counted from the operation's success, read
-- from the operation when another key asks for it, instead of being written
-- on the identity's row by the statement that records the success
-- (docs/policy.md, "Business identity"; docs/performance.md, finding 41).
--
-- Migration 0015's trigger updated the identity's row (free_at = the
-- success's time + the window) in the statement that made its operation
-- SUCCEEDED: an UPDATE on the way of every business operation that takes
-- effect, where a conflict, the only time free_at is read, is rare. Now
-- free_at stays 'infinity' while the operation exists and took effect, and
-- identity_free judges it: free once free_at has passed (an operation that
-- ended without effect: '-infinity', written by the trigger as before; or
-- one pruned, below), or once the operation that holds it SUCCEEDED more
-- than the window ago (its updated_at: a SUCCEEDED operation is never
-- changed again). Every statement that takes or reads an identity judges it
-- so, on the identity's row locked (ON CONFLICT) and the operation as the
-- statement sees it; OperationPrune writes free_at (the success's time +
-- the window) when it deletes an operation that took effect, so that an
-- identity outlives its operation's retention for the rest of its window.
-- Identities set by the old trigger keep the free_at it wrote, which
-- identity_free reads as before.
--
-- An older binary must not run against this schema: its prune would delete
-- an operation that took effect without writing its identity's free_at,
-- and the identity would stay held for ever.
-- opledger: breaks older binaries

-- identity_free reports whether an identity (its row's free_at, holder and
-- window) is free now, to be taken by another key. PL/pgSQL, whose plan
-- each session keeps: it runs on a conflict, not on every Prepare.
CREATE FUNCTION identity_free(free_at timestamptz, holder text, window_seconds float8) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN free_at <= statement_timestamp()
        OR free_at = 'infinity' AND EXISTS (
            SELECT 1 FROM operation o
            WHERE o.id = holder AND o.state = 'SUCCEEDED'
              AND o.updated_at + make_interval(secs => window_seconds) <= statement_timestamp());
END;
$$;

CREATE OR REPLACE FUNCTION operation_rules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.state IN ('AWAITING_APPROVAL', 'READY', 'EXECUTING', 'SUCCEEDED',
                          'FAILED', 'OUTCOME_UNKNOWN', 'REJECTED', 'CANCELLED')) THEN
        RAISE EXCEPTION 'operation %: invalid state %', NEW.id, NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'operation_state_check';
    END IF;
    IF NOT (NEW.approval_decision IN ('APPROVE', 'DENY')) THEN
        RAISE EXCEPTION 'operation %: invalid approval decision %', NEW.id, NEW.approval_decision
            USING ERRCODE = 'check_violation', CONSTRAINT = 'operation_approval_decision_check';
    END IF;
    IF NOT (length(NEW.idempotency_key) BETWEEN 1 AND 255) THEN
        RAISE EXCEPTION 'operation %: idempotency key of length %', NEW.id, length(NEW.idempotency_key)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'operation_idempotency_key_check';
    END IF;
    IF NOT (NEW.state <> 'EXECUTING' OR (NEW.lease_owner IS NOT NULL AND NEW.lease_expires_at IS NOT NULL)) THEN
        RAISE EXCEPTION 'operation %: EXECUTING without a lease', NEW.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'operation_executing_has_lease';
    END IF;
    IF NOT (NEW.first_sent_fence IS NULL OR NEW.first_sent_fence BETWEEN 1 AND NEW.fence) THEN
        RAISE EXCEPTION 'operation %: first_sent_fence % outside 1..%', NEW.id, NEW.first_sent_fence, NEW.fence
            USING ERRCODE = 'check_violation', CONSTRAINT = 'operation_check';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        NEW.prev_state := OLD.state;
        IF OLD.state = 'EXECUTING' AND NEW.state <> 'EXECUTING' AND OLD.waited THEN
            PERFORM pg_notify('opledger_operation', NEW.id);
        END IF;
        IF NEW.budget_names IS NOT NULL AND OLD.state = 'READY' AND NEW.state = 'AWAITING_APPROVAL'
           AND NEW.first_sent_fence IS NULL AND OLD.approval_expires_at <= statement_timestamp() THEN
            PERFORM operation_release_budgets(NEW.id, NEW.tenant, NEW.budget_names, NEW.budget_scopes);
        END IF;
        IF NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('FAILED', 'REJECTED', 'CANCELLED', 'SUCCEEDED') THEN
            IF NEW.budget_names IS NOT NULL AND NEW.state <> 'SUCCEEDED' THEN
                PERFORM operation_release_budgets(NEW.id, NEW.tenant, NEW.budget_names, NEW.budget_scopes);
            END IF;
            -- Without effect, the identity is free at once; with effect,
            -- identity_free reads its window from the operation.
            IF NEW.identity IS NOT NULL AND NEW.state <> 'SUCCEEDED' THEN
                UPDATE operation_identity i SET free_at = '-infinity'
                WHERE i.tenant = NEW.tenant AND i.tool = NEW.tool AND i.identity = NEW.identity AND i.operation_id = NEW.id;
            END IF;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
