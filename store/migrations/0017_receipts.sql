-- 0017_receipts: every event of an operation is hash-chained to the one
-- before it (docs/audit.md).
--
-- An event's hash links two parts. The writer (store, in Go) builds the
-- canonical JSON (RFC 8785, JCS) of what it knows of the event, {actor,
-- detail, facts, op, to, type, v: 2}, and passes its SHA-256 (the doc hash)
-- to the statement that writes the event; that statement adds what only
-- the row knows, in audit_link: the hash of the event before it (the
-- operation's chain_head, read from the row it updates, locked and in its
-- newest version), the event's seq, attempt, fence, time and from state.
-- So concurrent writers of one operation chain one after the other with no
-- second round trip and no read of the event table, and the statement's
-- own work is one SHA-256 over a hundred bytes (building the document in
-- SQL cost the hot path tens of microseconds of PostgreSQL CPU per event:
-- docs/performance.md). The hash is stored twice: in the event
-- (operation_event.hash) and on the operation (chain_head). facts holds
-- what the event set among the operation's decisive fields (its arguments'
-- digest, fingerprint, approvals, external reference, result digest, ...),
-- the JCS text of an object of strings (or nulls) as hashed; text, not
-- jsonb, so that the statement stores it without parsing it.
--
-- Existing rows: their events keep hash NULL and an operation's chain
-- starts at the first event written after this migration (its prev is
-- null); what an unhashed event set is not covered. A server started with
-- receipts off (the bench's baseline alone, docs/performance.md) passes no
-- doc hash, and its events have hash NULL too.
ALTER TABLE operation ADD COLUMN chain_head bytea;
ALTER TABLE operation_event
    ADD COLUMN hash bytea,
    ADD COLUMN facts text;

-- audit_link is an event's hash: the SHA-256 of prev (32 zero bytes when
-- the event is its chain's first), the doc hash, then seq, attempt and
-- fence as big-endian 4-, 4- and 8-byte integers, the time as a big-endian
-- 8-byte count of microseconds since the Unix epoch, and the from state's
-- UTF-8 bytes (none when NULL), the one field of varying length, last. A
-- NULL doc (receipts off) gives NULL. The Go verifier builds the same bytes
-- (audit.EventHash); store/audit_test.go holds the two to each other. A SQL
-- function of one expression, which the planner inlines into the statement
-- that calls it.
CREATE FUNCTION audit_link(prev bytea, doc bytea, seq integer, attempt integer, fence bigint, at timestamptz, from_state text)
RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE
RETURN sha256(COALESCE(prev, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea) || doc
    || int4send(seq) || int4send(attempt) || int8send(fence) || int8send((extract(epoch FROM at) * 1000000)::bigint)
    || convert_to(COALESCE(from_state, ''), 'UTF8'));
