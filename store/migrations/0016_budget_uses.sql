-- 0016_budget_uses: a budget's uses as rows, and a reservation that holds the
-- budget's lock for microseconds instead of a commit's flush (docs/policy.md,
-- "How a reservation is made"; docs/performance.md, "What budgets and a
-- business identity cost a call").
--
-- 0015 kept a budget's uses within its window as one jsonb array that every
-- reservation rewrote, under a row lock held to the Prepare's COMMIT: one
-- tenant-wide limit serialised every call through one flushed commit and one
-- rewrite of the whole window. Now:
--
--  * budget_use holds one row per operation counted (its share), and the
--    budget row holds their count and sum (used_count, used_sum): the
--    aggregate of exactly the budget_use rows of that budget that exist.
--    Every statement that inserts or deletes a budget_use row holds the
--    budget row's lock and updates the aggregate in the same transaction.
--  * budget_reserve (one statement, one round trip) locks the budgets in
--    name order, drops the uses that left the window, and admits all shares
--    or none. Being a function, each of its statements sees every commit
--    made before it (READ COMMITTED takes a snapshot per statement), so the
--    expiry and the check run on what the last holder of the lock left.
--  * A Prepare reserves in a transaction of its own committed with
--    synchronous_commit off (p_async): the lock is released at once, without
--    waiting for the flush. The Prepare's insert, committed synchronously
--    after it, flushes the reservation's WAL with its own (WAL is written in
--    order, and a synchronous standby confirms up to the later commit), so
--    an operation that exists always has its share; a share whose operation
--    was never stored (the insert refused, or the process died in between)
--    is released by the Prepare when it knows, else counted until its window
--    ends: conservative, never over.

CREATE TABLE budget_use (
    tenant       text NOT NULL,
    name         text NOT NULL,
    scope        text NOT NULL,
    operation_id text NOT NULL,
    at           timestamptz NOT NULL,
    amount       numeric NOT NULL,
    -- The operation first: its shares are found by (tenant, operation_id)
    -- whatever the budgets (the insert's check, a release), and the
    -- budget's uses by time through budget_use_at.
    PRIMARY KEY (tenant, operation_id, name, scope)
);
CREATE INDEX budget_use_at ON budget_use (tenant, name, scope, at);

INSERT INTO budget_use (tenant, name, scope, operation_id, at, amount)
SELECT b.tenant, b.name, b.scope, e->>'op', to_timestamp((e->>'at')::float8), (e->>'amount')::numeric
FROM budget b, jsonb_array_elements(b.uses) e
ON CONFLICT DO NOTHING;

ALTER TABLE budget
    ADD COLUMN used_count integer NOT NULL DEFAULT 0,
    ADD COLUMN used_sum numeric NOT NULL DEFAULT 0;
UPDATE budget b SET used_count = u.c, used_sum = u.s
FROM (SELECT tenant, name, scope, count(*)::integer AS c, sum(amount) AS s FROM budget_use GROUP BY 1, 2, 3) u
WHERE b.tenant = u.tenant AND b.name = u.name AND b.scope = u.scope;
ALTER TABLE budget DROP COLUMN uses;

-- budget_reserve reserves p_op's share of each budget i (p_names[i] for the
-- `per` key p_scopes[i], of tenant p_tenant; the caller sorts them by name,
-- the one lock order of every statement that takes budget locks), all or
-- none: at most p_max_counts[i] operations (0: no bound) and, with
-- p_has_sums[i], at most p_max_sums[i] in total within p_windows[i] seconds
-- counted back from the statement's time, and at most p_max_uses uses a
-- budget. With p_forces[i] (a limit whose `over` is approve) the share is
-- taken whether it fits or not, within p_max_uses. With p_renew (an
-- approval renewing a lapsed one) a share p_op holds already is admitted as
-- it is. Returns {refused, over}: the 0-based index of the first budget that
-- refused (then nothing was reserved), and of the first one taken past its
-- limit by force; -1 for none. With p_async the transaction it runs in
-- (call it as a statement of its own) commits without waiting for the
-- flush.
--
-- A budget's count and sum may still include uses that left the window
-- (they are dropped when a share does not fit otherwise, and by
-- budget_prune), so the first try, one guarded UPDATE judged on the row's
-- newest version with it locked, is stricter than the limit, never looser;
-- when it refuses, the budget's expired uses are dropped under the lock
-- and the share judged again, exactly.
CREATE FUNCTION budget_reserve(p_tenant text, p_op text, p_names text[], p_scopes text[], p_amounts float8[],
                               p_max_counts integer[], p_has_sums boolean[], p_max_sums float8[],
                               p_windows float8[], p_forces boolean[], p_max_uses integer, p_async boolean,
                               p_renew boolean)
RETURNS integer[] LANGUAGE plpgsql AS $$
DECLARE
    n       integer := coalesce(array_length(p_names, 1), 0);
    took    boolean[] := '{}';
    c       integer;
    s       numeric;
    gone_c  integer;
    gone_s  numeric;
    fits    boolean;
    over    integer := -1;
    refused integer := 0;
BEGIN
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    FOR i IN 1..n LOOP
        took[i] := false;
        IF NOT p_renew THEN
            UPDATE budget b
            SET used_count = b.used_count + 1, used_sum = b.used_sum + p_amounts[i]::numeric, window_seconds = p_windows[i]
            WHERE b.tenant = p_tenant AND b.name = p_names[i] AND b.scope = p_scopes[i]
              AND b.used_count + 1 <= p_max_uses
              AND (p_max_counts[i] = 0 OR b.used_count + 1 <= p_max_counts[i])
              AND (NOT p_has_sums[i] OR b.used_sum + p_amounts[i]::numeric <= p_max_sums[i]::numeric);
            IF FOUND THEN
                took[i] := true;
                CONTINUE;
            END IF;
        END IF;
        -- Lock the budget, creating it: ON CONFLICT DO UPDATE returns the
        -- newest version locked, and tries again by itself if the row it
        -- met is deleted meanwhile (budget_prune), so a row is always
        -- locked here.
        INSERT INTO budget AS b (tenant, name, scope, used_count, used_sum, window_seconds)
        VALUES (p_tenant, p_names[i], p_scopes[i], 0, 0, p_windows[i])
        ON CONFLICT (tenant, name, scope) DO UPDATE SET window_seconds = EXCLUDED.window_seconds
        RETURNING b.used_count, b.used_sum INTO c, s;
        IF c IS NULL THEN
            RAISE EXCEPTION 'budget_reserve: budget %/% of % not locked', p_names[i], p_scopes[i], p_tenant;
        END IF;
        -- The lock is held: this statement sees every use its holders wrote.
        WITH gone AS (
            DELETE FROM budget_use u
            WHERE u.tenant = p_tenant AND u.name = p_names[i] AND u.scope = p_scopes[i]
              AND u.at <= statement_timestamp() - make_interval(secs => p_windows[i])
            RETURNING u.amount)
        SELECT count(*)::integer, coalesce(sum(amount), 0) INTO gone_c, gone_s FROM gone;
        c := c - gone_c;
        s := s - gone_s;
        IF p_renew AND EXISTS (SELECT 1 FROM budget_use u
                               WHERE u.tenant = p_tenant AND u.name = p_names[i] AND u.scope = p_scopes[i]
                                 AND u.operation_id = p_op) THEN
            fits := true;
        ELSE
            fits := (p_max_counts[i] = 0 OR c + 1 <= p_max_counts[i])
                    AND (NOT p_has_sums[i] OR s + p_amounts[i]::numeric <= p_max_sums[i]::numeric);
            IF c + 1 > p_max_uses OR NOT fits AND NOT p_forces[i] THEN
                refused := i;
            ELSE
                took[i] := true;
                c := c + 1;
                s := s + p_amounts[i]::numeric;
                IF NOT fits AND over < 0 THEN
                    over := i - 1;
                END IF;
            END IF;
        END IF;
        IF took[i] OR gone_c > 0 THEN
            UPDATE budget b SET used_count = c, used_sum = s, window_seconds = p_windows[i]
            WHERE b.tenant = p_tenant AND b.name = p_names[i] AND b.scope = p_scopes[i];
        END IF;
        EXIT WHEN refused > 0;
    END LOOP;
    IF refused > 0 THEN
        -- All or none: give back the shares taken before the one refused.
        FOR j IN 1..refused - 1 LOOP
            IF took[j] THEN
                UPDATE budget b SET used_count = b.used_count - 1, used_sum = b.used_sum - p_amounts[j]::numeric
                WHERE b.tenant = p_tenant AND b.name = p_names[j] AND b.scope = p_scopes[j];
            END IF;
        END LOOP;
        RETURN ARRAY[refused - 1, -1];
    END IF;
    FOR i IN 1..n LOOP
        IF took[i] THEN
            INSERT INTO budget_use (tenant, name, scope, operation_id, at, amount)
            VALUES (p_tenant, p_names[i], p_scopes[i], p_op, statement_timestamp(), p_amounts[i]::numeric);
        END IF;
    END LOOP;
    RETURN ARRAY[-1, over];
END;
$$;

-- operation_release_budgets takes an operation's shares out of its budgets:
-- the budgets locked first, in name order (byte order, as the ledger sorts
-- the names it passes budget_reserve, whatever the database's collation),
-- so that its delete sees every use and the aggregate stays exact.
CREATE OR REPLACE FUNCTION operation_release_budgets(op text, op_tenant text, names text[], scopes text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM budget b, unnest(names, scopes) AS x(name, scope)
    WHERE b.tenant = op_tenant AND b.name = x.name AND b.scope = x.scope
    ORDER BY b.name COLLATE "C", b.scope COLLATE "C"
    FOR UPDATE OF b;
    WITH gone AS (
        DELETE FROM budget_use u USING unnest(names, scopes) AS x(name, scope)
        WHERE u.tenant = op_tenant AND u.name = x.name AND u.scope = x.scope AND u.operation_id = op
        RETURNING u.name, u.scope, u.amount)
    UPDATE budget b SET used_count = b.used_count - g.c, used_sum = b.used_sum - g.s
    FROM (SELECT gone.name, gone.scope, count(*)::integer AS c, sum(gone.amount) AS s FROM gone GROUP BY 1, 2) g
    WHERE b.tenant = op_tenant AND b.name = g.name AND b.scope = g.scope;
END;
$$;

-- budget_prune drops the uses that left their window from up to batch
-- budgets that have some (SKIP LOCKED: a budget being reserved is left to
-- its reservation), and deletes the budgets left with none. Returns the
-- budgets deleted.
CREATE FUNCTION budget_prune(batch integer) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    r       record;
    gone_c  integer;
    gone_s  numeric;
    deleted bigint := 0;
BEGIN
    -- What it does is redone by the next prune or reservation if lost: its
    -- locks need not wait for a flush.
    PERFORM set_config('synchronous_commit', 'off', true);
    FOR r IN
        SELECT p.tenant, p.name, p.scope, p.window_seconds FROM budget p
        WHERE p.used_count = 0
           OR EXISTS (SELECT 1 FROM budget_use u
                      WHERE u.tenant = p.tenant AND u.name = p.name AND u.scope = p.scope
                        AND u.at <= statement_timestamp() - make_interval(secs => p.window_seconds))
        LIMIT batch
        FOR UPDATE SKIP LOCKED
    LOOP
        WITH gone AS (
            DELETE FROM budget_use u
            WHERE u.tenant = r.tenant AND u.name = r.name AND u.scope = r.scope
              AND u.at <= statement_timestamp() - make_interval(secs => r.window_seconds)
            RETURNING u.amount)
        SELECT count(*)::integer, coalesce(sum(amount), 0) INTO gone_c, gone_s FROM gone;
        UPDATE budget b SET used_count = b.used_count - gone_c, used_sum = b.used_sum - gone_s
        WHERE b.tenant = r.tenant AND b.name = r.name AND b.scope = r.scope AND gone_c > 0;
        DELETE FROM budget b
        WHERE b.tenant = r.tenant AND b.name = r.name AND b.scope = r.scope AND b.used_count = 0;
        IF FOUND THEN
            deleted := deleted + 1;
        END IF;
    END LOOP;
    RETURN deleted;
END;
$$;

-- operation_admit_check is the last word of OperationInsert. An operation
-- that takes a business identity in the statement that inserts it: the
-- identity taken (took) but the operation not inserted (its key is taken)
-- would leave the identity held by an operation that does not exist, so
-- the whole statement is undone with SQLSTATE OL409, which the store reads
-- as "the key is taken". An operation with budget shares is inserted only
-- if they are all there (shares of shares_needed found): a reservation
-- committed asynchronously is lost if the database crashed or failed over
-- before it was flushed, and the insert, on a new connection, must not
-- store an operation that counts nowhere; SQLSTATE OL503 says so, which
-- the store reads as "unavailable, nothing was stored" (the caller retries
-- and reserves again).
CREATE FUNCTION operation_admit_check(take boolean, took bigint, inserted bigint, shares_needed integer, shares_found bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF inserted = 0 AND shares_found < shares_needed THEN
        RAISE EXCEPTION 'opledger: the budget reservation of this operation is gone (the database restarted or failed over before it was flushed); nothing was stored'
            USING ERRCODE = 'OL503';
    END IF;
    IF take AND took > 0 AND inserted = 0 THEN
        RAISE EXCEPTION 'opledger: the idempotency key is taken; the business identity taken with it is undone'
            USING ERRCODE = 'OL409';
    END IF;
    RETURN false;
END;
$$;
