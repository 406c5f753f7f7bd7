-- 0015_budgets_and_identity: how much an agent may do, and one operation per
-- business identity (docs/policy.md, "Budgets and business identity").
--
-- budget holds, per tenant, limit and `per` key, the operations counted
-- within the limit's window: uses is [{op, at (epoch seconds on the
-- database's clock), amount}]. A Prepare reserves its share with one
-- INSERT … ON CONFLICT DO UPDATE … WHERE (BudgetReserve): the row is locked
-- and the WHERE judged on its newest version, so any number of concurrent
-- Prepares on any number of replicas are admitted one after the other and
-- never together exceed the limit; the reservation commits with the
-- operation or not at all. Entries older than the window are dropped by the
-- next reservation.
CREATE TABLE budget (
    tenant text NOT NULL,
    name   text NOT NULL,
    scope  text NOT NULL,
    uses   jsonb NOT NULL,
    -- The limit's window when last reserved: the pruner deletes a budget
    -- none of whose entries is within it.
    window_seconds float8 NOT NULL,
    PRIMARY KEY (tenant, name, scope)
);

-- operation_identity holds each business identity of a tool (an invoice id)
-- for the operation that has it: free_at is 'infinity' while the operation
-- is live, the time it took effect plus the window once it SUCCEEDED, and
-- '-infinity' once it ended without effect. A Prepare takes it with one
-- INSERT … ON CONFLICT DO UPDATE … WHERE free_at <= now (IdentityReserve),
-- or when it comes with the holder's own idempotency key (its replay or
-- twin, which the operation's insert then answers; or the same call after
-- the holder's row was pruned, which gets the same downstream key).

CREATE TABLE operation_identity (
    tenant         text NOT NULL,
    tool           text NOT NULL,
    identity       text NOT NULL,
    operation_id   text NOT NULL,
    idempotency_key text NOT NULL,
    window_seconds float8 NOT NULL,
    free_at        timestamptz NOT NULL,
    PRIMARY KEY (tenant, tool, identity)
);

-- What an operation reserved: its budgets (parallel arrays of limit names
-- and scopes) and its identity.
ALTER TABLE operation
    ADD COLUMN budget_names text[],
    ADD COLUMN budget_scopes text[],
    ADD COLUMN identity text;

-- operation_rules (0010) also releases what an operation reserved when it
-- ends: without effect (FAILED, REJECTED, CANCELLED) its budget shares and
-- its identity; with effect (SUCCEEDED) its identity stays taken for the
-- window from now. An approval that lapsed before anything was sent (READY
-- back to AWAITING_APPROVAL past its approval's end) releases the budget
-- shares too; the approval that renews it reserves them again
-- (BudgetReserve, in the decision's transaction). In the statement that
-- makes the change, whichever it is, so no path can forget.
-- operation_release_budgets takes an operation's entries out of its budgets.
CREATE FUNCTION operation_release_budgets(op text, op_tenant text, names text[], scopes text[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE budget b SET uses = COALESCE((SELECT jsonb_agg(e) FROM jsonb_array_elements(b.uses) e
                                          WHERE e->>'op' IS DISTINCT FROM op), '[]'::jsonb)
    FROM unnest(names, scopes) AS u(name, scope)
    WHERE b.tenant = op_tenant AND b.name = u.name AND b.scope = u.scope;
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
            IF NEW.identity IS NOT NULL THEN
                UPDATE operation_identity i
                SET free_at = CASE WHEN NEW.state = 'SUCCEEDED'
                                   THEN statement_timestamp() + make_interval(secs => i.window_seconds)
                                   ELSE '-infinity'::timestamptz END
                WHERE i.tenant = NEW.tenant AND i.tool = NEW.tool AND i.identity = NEW.identity AND i.operation_id = NEW.id;
            END IF;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
