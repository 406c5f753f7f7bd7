-- 0021_budget_reserve_in_insert: a Prepare of a tool whose limits are all per
-- key reserves its budget shares in the statement that inserts it
-- (OperationInsertReserving; docs/policy.md, "How a reservation is made";
-- docs/performance.md, finding 41).
--
-- Migration 0016 reserved every share in a statement and transaction of its
-- own, committed without waiting for its flush, so that a budget's lock is
-- held for microseconds: what a tenant-wide budget, which every call
-- shares, needs. A budget per key (a customer, an agent) is shared by few
-- calls, and its reservation is now a step of the insert's statement: one
-- round trip, one transaction, no probe of the shares, the shares and the
-- operation committed together.
--
-- budget.max_count and budget.max_sum are the bounds of the limit as the
-- last share counted by OperationInsertReserving saw them (0 and NULL: none).
-- They exist so that the upsert that counts a share can judge it in ON
-- CONFLICT's WHERE, which sees the proposed row (EXCLUDED) and the stored
-- one, not the statement's other values; nothing else reads them.
ALTER TABLE budget
    ADD COLUMN max_count integer NOT NULL DEFAULT 0,
    ADD COLUMN max_sum numeric;

-- operation_admit_reserved is the last word of OperationInsertReserving: the
-- operation is stored with every share it needs (shares_taken of
-- shares_needed) and, when it takes one (take), its identity (took), or the
-- whole statement is undone. SQLSTATE OL429: a share does not fit as the
-- budget stands (the store reads ErrSharesDoNotFit, and the caller reserves
-- in a statement of its own, which judges exactly); OL409: the identity is
-- held, or the key taken (the store reads "not inserted", and the caller
-- asks which).
CREATE FUNCTION operation_admit_reserved(shares_needed integer, shares_taken bigint, take boolean, took bigint, inserted bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF shares_taken < shares_needed THEN
        RAISE EXCEPTION 'opledger: the operation''s budget shares do not all fit as the budgets stand; nothing was stored'
            USING ERRCODE = 'OL429';
    END IF;
    IF take AND took = 0 OR inserted = 0 THEN
        RAISE EXCEPTION 'opledger: the operation was not inserted (its identity is held, or its key taken); its budget shares are undone'
            USING ERRCODE = 'OL409';
    END IF;
    RETURN false;
END;
$$;
