-- 0002_open_operations: lets the metrics gauge count open operations by
-- state without scanning finished ones.
CREATE INDEX operation_open ON operation (state)
    WHERE state IN ('AWAITING_APPROVAL', 'READY', 'EXECUTING', 'OUTCOME_UNKNOWN');
