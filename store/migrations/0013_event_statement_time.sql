-- 0013_event_statement_time: an event is stamped when the statement that
-- writes it runs, not when its transaction began. Approve and a webhook
-- lock the row first and write their transition after any wait for that
-- lock; with now() their events carried the time before the wait, and the
-- log showed an approval given seconds before its window (counted from the
-- decision, statement_timestamp()) began. A transaction of one statement,
-- as every other transition is, gets the same time as before.
ALTER TABLE operation_event ALTER COLUMN created_at SET DEFAULT statement_timestamp();
