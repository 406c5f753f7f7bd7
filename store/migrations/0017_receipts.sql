-- 0017_receipts: every event of an operation is hash-chained to the one
-- before it (docs/audit.md).
--
-- An event's hash is the SHA-256 of its canonical JSON (RFC 8785, JCS), an
-- object of fixed members, one of which (prev) is the hash of the event
-- before it in the same operation. The statement that writes an event
-- computes its hash (audit_event_hash) and stores it twice: in the event
-- (operation_event.hash) and on the operation (chain_head), which the next
-- event's statement reads from the row it updates, locked and in its newest
-- version, so concurrent writers of one operation chain one after the other
-- with no second round trip and no read of the event table. facts holds
-- what the event set among the operation's decisive fields (its arguments'
-- digest, fingerprint, approvals, external reference, result digest, ...),
-- as a JSON object of strings, part of the hashed form.
--
-- Existing rows: their events keep hash NULL and an operation's chain
-- starts at the first event written after this migration (its prev is
-- null); what an unhashed event set is not covered.
ALTER TABLE operation ADD COLUMN chain_head bytea;
ALTER TABLE operation_event
    ADD COLUMN hash bytea,
    ADD COLUMN facts jsonb;

-- audit_json is a text as a JSON (JCS) string, or null: PostgreSQL's JSON
-- escaping (", \, \b \f \n \r \t, other controls as lowercase \u00xx,
-- everything else as it is) is RFC 8785's.
CREATE FUNCTION audit_json(s text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN COALESCE(to_json(s)::text, 'null');

-- audit_event_doc is an event's canonical JSON: the JCS form of
-- {actor, at (epoch microseconds), attempt, detail, facts, fence, from, op,
-- prev (lowercase hex, or null), seq, to, type, v: 1}. facts is the JCS
-- text of an object of strings (or nulls), members in code-point order,
-- which the statement that writes the event builds (NULL: {}). The Go
-- verifier builds the same bytes with the project's JCS (audit.EventDoc);
-- store/audit_test.go holds the two to each other. SQL functions of one
-- expression, which the planner inlines into the statement that calls them.
CREATE FUNCTION audit_event_doc(prev bytea, op text, seq integer, type text, actor text, from_state text, to_state text,
                                attempt integer, fence bigint, detail text, at timestamptz, facts text)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN '{"actor":' || audit_json(actor)
    || ',"at":' || (extract(epoch FROM at) * 1000000)::bigint::text
    || ',"attempt":' || attempt::text
    || ',"detail":' || audit_json(detail)
    || ',"facts":' || COALESCE(facts, '{}')
    || ',"fence":' || fence::text
    || ',"from":' || audit_json(from_state)
    || ',"op":' || audit_json(op)
    || ',"prev":' || audit_json(encode(prev, 'hex'))
    || ',"seq":' || seq::text
    || ',"to":' || audit_json(to_state)
    || ',"type":' || audit_json(type)
    || ',"v":1}';

-- audit_event_hash is the SHA-256 of audit_event_doc's UTF-8 bytes.
CREATE FUNCTION audit_event_hash(prev bytea, op text, seq integer, type text, actor text, from_state text, to_state text,
                                 attempt integer, fence bigint, detail text, at timestamptz, facts text)
RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE
RETURN sha256(convert_to(audit_event_doc(prev, op, seq, type, actor, from_state, to_state, attempt, fence, detail, at, facts), 'UTF8'));
