-- 0003_retention_and_quota: the pruner's index over finished operations, and
-- per-tenant counters of operations created per minute for the quota.
CREATE INDEX operation_finished ON operation (updated_at)
    WHERE state IN ('SUCCEEDED', 'FAILED', 'REJECTED', 'CANCELLED');

CREATE TABLE tenant_usage (
    tenant  text NOT NULL,
    minute  timestamptz NOT NULL,
    created integer NOT NULL,
    PRIMARY KEY (tenant, minute)
);
