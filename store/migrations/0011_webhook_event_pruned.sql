-- 0011_webhook_event_pruned: the pruner also forgets webhook events received
-- longer than the retention ago (the table grew for ever). The index lets
-- each batch find the oldest events without reading the whole table.
CREATE INDEX webhook_event_received ON webhook_event (received_at);
