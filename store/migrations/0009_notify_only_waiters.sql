-- 0009_notify_only_waiters: an operation leaving EXECUTING notifies only when
-- an Execute of another replica is waiting for it. NOTIFY serialises the
-- commits that carry it on one cluster-wide lock (held through the WAL
-- flush), so notifying on every outcome capped the rate at which outcomes
-- could commit, although almost no outcome has a waiter. A waiter sets
-- `waited` (a guarded update on the state and fence it read) before it
-- sleeps; the row lock orders it with the outcome's update, so either the
-- outcome sees the flag and notifies, or the waiter's update finds the
-- operation already gone from EXECUTING and it reads the outcome. Waiters
-- on the holder's own replica are woken in process. A claim clears the flag.
ALTER TABLE operation ADD COLUMN waited boolean NOT NULL DEFAULT false;

DROP TRIGGER operation_state_changed ON operation;

CREATE TRIGGER operation_state_changed
    AFTER UPDATE OF state ON operation
    FOR EACH ROW WHEN (OLD.state = 'EXECUTING' AND NEW.state <> 'EXECUTING' AND OLD.waited)
    EXECUTE FUNCTION operation_notify();
