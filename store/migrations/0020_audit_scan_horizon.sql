-- 0020_audit_scan_horizon: the checkpoint task reads only the operations
-- changed since its last scan, not every row (docs/audit.md, "Signed
-- checkpoints").
--
-- scan_horizon is the time from which the next checkpoint looks for changed
-- chain heads: every operation whose chain head a transaction not yet
-- visible to this checkpoint's scan may still change has its updated_at at
-- or after it (store/queries/audit.sql, AuditScanHorizon). NULL (the
-- checkpoints made before this migration) scans from the beginning once.
ALTER TABLE audit_checkpoint ADD COLUMN scan_horizon timestamptz;

-- audit_scan_horizon returns slack seconds before a time at or before which
-- no chain head that a later statement's snapshot cannot see yet was
-- written. A statement that sets chain_head sets updated_at to its
-- statement's (or its transaction's) start, at or after its transaction's
-- start; a transaction that a snapshot taken after this call does not see
-- is either open now, so its start is in the minimum below, or starts after
-- now(). Sessions hidden from the calling role (another role's, without
-- pg_read_all_stats) show no transaction start: when one of them may write
-- operations the answer is NULL, and the caller keeps its last horizon.
-- Only this database's sessions count: no other can write its operations.
-- opledger uses no two-phase transactions, whose prepared state
-- pg_stat_activity does not show. The slack (store.AuditScanSlack) covers
-- the instant between a transaction taking its start time and showing it
-- here, and a promoted standby's clock a little behind the old primary's.
CREATE FUNCTION audit_scan_horizon(slack double precision) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN bool_or(a.query = '<insufficient privilege>'
                     AND has_table_privilege(a.usesysid, 'operation', 'INSERT, UPDATE'))
            THEN NULL
        ELSE least(now(), min(a.xact_start) FILTER (WHERE a.pid <> pg_backend_pid())) - make_interval(secs => slack)
        END
    FROM pg_stat_activity a
    WHERE a.datid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
$$;
