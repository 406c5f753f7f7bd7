-- 0004_webhooks: find operations by their downstream key (webhooks carry
-- it), and remember every webhook event so that a duplicate delivery
-- changes nothing.
CREATE UNIQUE INDEX operation_downstream_key ON operation (downstream_key);

CREATE TABLE webhook_event (
    tool         text NOT NULL,
    id           text NOT NULL,
    operation_id text,
    received_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tool, id)
);
