-- 0012_approved_unsent: the console lists the approvals not executed yet
-- (READY, approval required, nothing sent) by themselves. Read through
-- operation_list they would be a filter on every READY operation of the
-- tenant, and operations of tools that need no approval, prepared and never
-- executed, stay READY for good; this partial index holds only the rows the
-- list shows.
CREATE INDEX operation_approved_unsent ON operation (tenant, created_at, id)
    WHERE state = 'READY' AND approval_required AND first_sent_fence IS NULL;
