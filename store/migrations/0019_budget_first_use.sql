-- 0019_budget_first_use: a budget's first share in one statement.
--
-- budget_reserve's first try (migration 0016) was an UPDATE of the budget's
-- row; a budget that had no row yet (a customer's first call in a window,
-- or the first after budget_prune deleted an empty one) missed it and took
-- the slow path: lock the row by inserting it empty, delete its expired uses
-- (there are none), judge, update it. The first try is now an upsert: a
-- budget without a row has no uses (budget_prune deletes a budget only when
-- it holds none, and a share is counted on its row before its use is
-- written), so a share that fits an empty budget is counted by the row's
-- insert, exactly; a budget that has a row is judged as before, on its
-- newest version with it locked (ON CONFLICT DO UPDATE locks the row even
-- when its WHERE refuses). A share that does not fit an empty budget fits no
-- budget (counts and amounts are never negative), and takes the slow path
-- to be refused or, with `over: approve`, forced. Everything else is
-- migration 0016's function as it was.

CREATE OR REPLACE FUNCTION budget_reserve(p_tenant text, p_op text, p_names text[], p_scopes text[], p_amounts float8[],
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
            -- The first try: a budget that does not exist yet has no uses
            -- (budget_prune deletes a budget only once it holds none), so
            -- the share is judged and counted by the row's insert; one that
            -- exists is judged on its newest version, locked.
            INSERT INTO budget AS b (tenant, name, scope, used_count, used_sum, window_seconds)
            SELECT p_tenant, p_names[i], p_scopes[i], 1, p_amounts[i]::numeric, p_windows[i]
            WHERE 1 <= p_max_uses AND (p_max_counts[i] = 0 OR 1 <= p_max_counts[i])
              AND (NOT p_has_sums[i] OR p_amounts[i]::numeric <= p_max_sums[i]::numeric)
            ON CONFLICT (tenant, name, scope) DO UPDATE
            SET used_count = b.used_count + 1, used_sum = b.used_sum + EXCLUDED.used_sum, window_seconds = EXCLUDED.window_seconds
            WHERE b.used_count + 1 <= p_max_uses
              AND (p_max_counts[i] = 0 OR b.used_count + 1 <= p_max_counts[i])
              AND (NOT p_has_sums[i] OR b.used_sum + EXCLUDED.used_sum <= p_max_sums[i]::numeric);
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
