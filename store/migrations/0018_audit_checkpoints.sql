-- 0018_audit_checkpoints: the receipts' signed checkpoints (docs/audit.md).
--
-- audit_leaf is the append-only log of chain heads: every checkpoint
-- appends one leaf per operation whose chain head changed since the last
-- checkpoint (its id, event count and head), at the next indexes.
-- audit_checkpoint holds each signed tree head of that log (size, RFC 6962
-- root, the signed note) and the compact range the next one appends to.
-- audit_head is the head each operation had at its last checkpoint: the
-- heads that differ are the ones the next checkpoint commits to. Only the
-- checkpoint task writes these tables, one replica at a time (a
-- transaction-level advisory lock), so they never conflict, and the hot
-- path never touches them.
CREATE TABLE audit_checkpoint (
    seq          bigint PRIMARY KEY,
    tree_size    bigint NOT NULL,
    root         bytea NOT NULL,
    range_hashes bytea[] NOT NULL,
    note         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT statement_timestamp()
);

CREATE TABLE audit_leaf (
    idx            bigint PRIMARY KEY,
    checkpoint_seq bigint NOT NULL REFERENCES audit_checkpoint (seq),
    operation_id   text NOT NULL,
    events         integer NOT NULL,
    head           bytea NOT NULL
);
CREATE INDEX audit_leaf_operation ON audit_leaf (operation_id, idx);

CREATE TABLE audit_head (
    operation_id text PRIMARY KEY,
    head         bytea NOT NULL
);
