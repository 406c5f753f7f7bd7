-- 0010_lighter_writes: the same rules, for less work on every write
-- (docs/performance.md, finding 14).
--
-- PostgreSQL 15 reads every CHECK constraint of a table back from its stored
-- text and compiles it again for every INSERT and UPDATE statement it runs
-- (once per statement, never cached across them), and likewise a trigger's
-- WHEN clause: on operation that was a sixth of the backend's work for a new
-- tool call. A PL/pgSQL function is compiled once per session. So the row
-- rules move, word for word and under the same names, into one BEFORE
-- trigger, which also sends the outcome notification that 0009's trigger
-- sent: a BEFORE UPDATE row trigger runs on the row's newest version under
-- its lock, so OLD.waited is ordered with OperationMarkWaited exactly as
-- before, and a NOTIFY is delivered only if the transaction commits.
--
-- prev_state is the state a row had before its last update, set by the
-- same trigger from the locked row (OLD): the statement that records a
-- transition's event reads where the operation came from in the row its
-- UPDATE returns, instead of locking and reading the row first in a CTE of
-- its own (a seventh of that statement's work).
--
-- operation_event's foreign key made every event insert look the operation
-- up again and share-lock the row the same statement had just written. Every
-- event is written by the statement that writes its operation (from the row
-- that statement returns), so it cannot name another; the pruner deletes an
-- operation's events in the statement that deletes the operation.

ALTER TABLE operation ADD COLUMN prev_state text;

DROP TRIGGER operation_state_changed ON operation;
DROP FUNCTION operation_notify();

ALTER TABLE operation
    DROP CONSTRAINT operation_state_check,
    DROP CONSTRAINT operation_approval_decision_check,
    DROP CONSTRAINT operation_idempotency_key_check,
    DROP CONSTRAINT operation_executing_has_lease,
    DROP CONSTRAINT operation_check;

-- operation_rules enforces what the CHECK constraints did, with their
-- semantics (a rule holds unless it is false: NULL passes) and their names
-- and SQLSTATE (23514); on an update it records the state the row had
-- (prev_state) and wakes other replicas' Executes waiting for the outcome of
-- an attempt that ends (store/notify.go).
CREATE FUNCTION operation_rules() RETURNS trigger LANGUAGE plpgsql AS $$
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
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER operation_rules
    BEFORE INSERT OR UPDATE ON operation
    FOR EACH ROW EXECUTE FUNCTION operation_rules();

ALTER TABLE operation_event DROP CONSTRAINT operation_event_operation_id_fkey;
