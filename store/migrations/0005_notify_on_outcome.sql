-- 0005_notify_on_outcome: only an operation leaving EXECUTING can end a
-- wait, so only that transition notifies. PostgreSQL serialises commits that
-- carry a NOTIFY (a cluster-wide lock held through the WAL flush), so
-- notifying on every transition halved the write throughput (docs/performance.md).
DROP TRIGGER operation_state_changed ON operation;

CREATE TRIGGER operation_state_changed
    AFTER UPDATE OF state ON operation
    FOR EACH ROW WHEN (OLD.state = 'EXECUTING' AND NEW.state <> 'EXECUTING')
    EXECUTE FUNCTION operation_notify();
