-- 0006_list_operations: ListOperations pages through a tenant's operations
-- newest first, optionally in some states. One index serves every filter:
-- the query walks it backwards once per state (a state filter is an equality
-- on the second column), from the page token's (created_at, id) onwards, and
-- stops after a page.
CREATE INDEX operation_list ON operation (tenant, state, created_at, id);
