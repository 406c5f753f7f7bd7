-- 0014_policy: an operation records the policy it was judged under and its
-- approvals (docs/policy.md).
--
-- approvals_needed is the quorum the policy demanded (0: no approval),
-- approvals the decisions of the current round (a lapsed approval starts a
-- new one), each {principal_id, principal_name, decision, decided_at,
-- fingerprint, reason, policy_digest}: on the row itself, so that reading
-- an operation, as every Execute does, costs no second statement, and the
-- guard "not the same approver twice" is part of the statement that counts
-- the approval. policy_digest is the digest of the tool version's policy
-- the operation was last judged under; approval_rule the rule that demanded
-- the approval. The claim sends only an operation judged under a policy its
-- server holds current, so an operation prepared before a policy change is
-- judged again before anything is sent (store/queries/operation.sql,
-- OperationClaim, OperationPolicyApply).
--
-- supersedes / superseded_by link an operation an approver edited to the
-- one that carries the edit.
ALTER TABLE operation
    ADD COLUMN approvals_needed integer NOT NULL DEFAULT 0,
    ADD COLUMN approvals jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN policy_digest text NOT NULL DEFAULT '',
    ADD COLUMN approval_rule text NOT NULL DEFAULT '',
    ADD COLUMN supersedes text,
    ADD COLUMN superseded_by text;

-- Open operations from before: the quorum of one they had, and the approval
-- given, with an event that says so (a change of an operation is an event:
-- store/events_internal_test.go). Finished ones keep their decision in the
-- approval_* columns, as they are shown.
WITH upd AS (
    UPDATE operation SET
        approvals_needed = 1,
        approval_rule = 'approval.required',
        approvals = CASE WHEN approval_decision = 'APPROVE' AND state <> 'AWAITING_APPROVAL'
                         THEN jsonb_build_array(jsonb_build_object(
                                  'principal_id', approval_decided_by, 'principal_name', '', 'decision', approval_decision,
                                  'decided_at', approval_decided_at, 'fingerprint', approval_fingerprint,
                                  'reason', COALESCE(approval_reason, ''), 'policy_digest', ''))
                         ELSE '[]'::jsonb END,
        events = events + 1
    WHERE approval_required AND state IN ('AWAITING_APPROVAL', 'READY', 'EXECUTING', 'OUTCOME_UNKNOWN')
    RETURNING id, events, state, attempts, fence
)
INSERT INTO operation_event (operation_id, seq, type, actor, from_state, to_state, attempt, fence, detail)
SELECT id, events, 'POLICY_CHECKED', 'migration', state, state, attempts, fence,
       'migration 0014: its approval rule is a quorum of one, and an approval given counts'
FROM upd;

-- An edit's new operation is found from the original.
CREATE UNIQUE INDEX operation_supersedes ON operation (supersedes) WHERE supersedes IS NOT NULL;

-- A policy change that sends an operation back to AWAITING_APPROVAL tells
-- the approvers, like a lapsed approval.
ALTER TABLE approval_notification DROP CONSTRAINT approval_notification_reason_check;
ALTER TABLE approval_notification ADD CONSTRAINT approval_notification_reason_check
    CHECK (reason IN ('prepared', 'approval_expired', 'policy_changed'));
