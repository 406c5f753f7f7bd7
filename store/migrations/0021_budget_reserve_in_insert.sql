-- 0021_budget_reserve_in_insert: (prototype)
CREATE FUNCTION operation_admit_check(take boolean, took bigint, inserted bigint, shares_needed integer, shares_found bigint, reserved integer[])
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF reserved IS NOT NULL THEN
        IF reserved <> '{-1,-1}'::integer[] THEN
            RAISE EXCEPTION 'opledger: the operation''s budget shares do not fit as they stand; nothing was stored'
                USING ERRCODE = 'OL429';
        END IF;
        IF inserted = 0 THEN
            RAISE EXCEPTION 'opledger: the operation was not inserted; its budget shares are undone'
                USING ERRCODE = 'OL409';
        END IF;
        RETURN false;
    END IF;
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
