-- 0023_budget_reserve_each: the shares of several operations in one budget,
-- reserved by one statement (BudgetReserveEach; docs/policy.md, "How a
-- reservation is made"; docs/performance.md, finding 43).
--
-- A tenant-wide budget is shared by every call of its tool: each Prepare's
-- reservation (budget_reserve, a transaction of its own) locks the same
-- row, and at 64 concurrent calls most of a call's extra CPU was the queue
-- on that lock (a wait, a wake-up and a new try per holder), not the
-- reservation's own work. A server now sends the shares that arrive for one
-- budget while its previous statement for that budget runs as one
-- statement: one lock, one update of the budget's row, one insert of the
-- uses, each share judged in turn on what the shares before it left.
--
-- budget_reserve_each reserves the share of each operation p_ops[i]
-- (amount p_amounts[i]) in the budget (p_tenant, p_name, p_scope) under one
-- limit's bounds, as budget_reserve judges a share: at most p_max_count
-- operations (0: no bound) and, with p_has_sum, at most p_max_sum in total
-- within p_window seconds counted back from the statement's time, at most
-- p_max_uses uses a budget; with p_force (`over: approve`) a share is taken
-- whether it fits or not, within p_max_uses. It returns, per operation, 0
-- (refused: nothing reserved for it), 1 (taken) or 2 (taken past the limit
-- by force). The shares are judged in the order given; the budget's row is
-- locked (created when missing) before any is, so each is judged on the
-- budget as its last holder left it and the ones before it in this call.
-- When the whole batch fits on the row's count and sum, which may still
-- include uses that left the window (stricter than the limit, never
-- looser), every share is taken as it is; otherwise the expired uses are
-- dropped first and each share judged exactly. Call it as a statement of
-- its own: its transaction commits without waiting for the flush (as
-- budget_reserve with p_async), and each operation's synchronous insert
-- after it makes its share durable.
CREATE FUNCTION budget_reserve_each(p_tenant text, p_name text, p_scope text, p_ops text[], p_amounts float8[],
                                    p_max_count integer, p_has_sum boolean, p_max_sum float8, p_window float8,
                                    p_force boolean, p_max_uses integer)
RETURNS smallint[] LANGUAGE plpgsql AS $$
DECLARE
    n       integer := coalesce(cardinality(p_ops), 0);
    outcome smallint[] := array_fill(0::smallint, ARRAY[n]);
    c       integer;
    s       numeric;
    gone_c  integer := 0;
    gone_s  numeric := 0;
    a       numeric;
    fits    boolean;
    took    boolean := false;
    c0      integer;
    s0      numeric;
    new_c   integer := 0;
    new_s   numeric := 0;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF n = 0 THEN
        RETURN outcome;
    END IF;
    -- Lock the budget, creating it: ON CONFLICT DO UPDATE returns the
    -- newest version locked, and tries again by itself if the row it met is
    -- deleted meanwhile (budget_prune).
    SELECT b.used_count, b.used_sum INTO c, s FROM budget b
    WHERE b.tenant = p_tenant AND b.name = p_name AND b.scope = p_scope
    FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO budget AS b (tenant, name, scope, used_count, used_sum, window_seconds)
        VALUES (p_tenant, p_name, p_scope, 0, 0, p_window)
        ON CONFLICT (tenant, name, scope) DO UPDATE SET window_seconds = EXCLUDED.window_seconds
        RETURNING b.used_count, b.used_sum INTO c, s;
    END IF;
    IF c IS NULL THEN
        RAISE EXCEPTION 'budget_reserve_each: budget %/% of % not locked', p_name, p_scope, p_tenant;
    END IF;
    -- The whole batch, judged on the row as it stands: when it fits, every
    -- share does, in any order.
    IF c + n > p_max_uses
       OR p_max_count <> 0 AND c + n > p_max_count
       OR p_has_sum AND s + (SELECT sum(x::numeric) FROM unnest(p_amounts) x) > p_max_sum::numeric THEN
        -- The lock is held: this statement sees every use its holders wrote.
        WITH gone AS (
            DELETE FROM budget_use u
            WHERE u.tenant = p_tenant AND u.name = p_name AND u.scope = p_scope
              AND u.at <= statement_timestamp() - make_interval(secs => p_window)
            RETURNING u.amount)
        SELECT count(*)::integer, coalesce(sum(amount), 0) INTO gone_c, gone_s FROM gone;
        c := c - gone_c;
        s := s - gone_s;
    END IF;
    c0 := c;
    s0 := s;
    FOR i IN 1..n LOOP
        a := p_amounts[i]::numeric;
        fits := (p_max_count = 0 OR c + 1 <= p_max_count) AND (NOT p_has_sum OR s + a <= p_max_sum::numeric);
        IF c + 1 <= p_max_uses AND (fits OR p_force) THEN
            c := c + 1;
            s := s + a;
            outcome[i] := CASE WHEN fits THEN 1 ELSE 2 END;
            took := true;
        END IF;
    END LOOP;
    IF took THEN
        -- An operation that holds a share of this budget already (its
        -- Prepare reserving again after a release that failed) keeps it,
        -- counted once: its share was judged above as a new one (stricter
        -- for the shares after it, never looser), and is answered taken.
        WITH ins AS (
            INSERT INTO budget_use (tenant, name, scope, operation_id, at, amount)
            SELECT p_tenant, p_name, p_scope, u.op, statement_timestamp(), u.amount::numeric
            FROM unnest(p_ops, p_amounts, outcome) AS u(op, amount, taken)
            WHERE u.taken > 0
            ON CONFLICT DO NOTHING
            RETURNING amount)
        SELECT count(*)::integer, coalesce(sum(amount), 0) INTO new_c, new_s FROM ins;
    END IF;
    IF new_c > 0 OR gone_c > 0 THEN
        UPDATE budget b SET used_count = c0 + new_c, used_sum = s0 + new_s, window_seconds = p_window
        WHERE b.tenant = p_tenant AND b.name = p_name AND b.scope = p_scope;
    END IF;
    RETURN outcome;
END;
$$;
