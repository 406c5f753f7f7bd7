"""edit is what a runner tells the model about a tool's policy: an approver's edit of a call
(approve-with-edit: the operation that ran is not the one the agent prepared), the refusals of a
policy or a budget, and the policy's summary in the model's tool description. The texts are the
same in every opledger client (clients/testdata/tool_outcomes.json)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from .fingerprint import canonicalize

#: MESSAGE_EDITED (with the changes, the verb of the outcome's status, the arguments that ran, the
#: edited operation and the original) tells the model that an approver changed the call's
#: arguments before approving it: what ran is not what the model asked for, and the call as made
#: never runs.
MESSAGE_EDITED = (
    "An approver changed {changes}; {verb}: {args}. "
    "Operation {operation_id} replaces {supersedes}, the call as it was made, which will not run."
)
#: MESSAGE_POLICY_DENIED (with the ledger's refusal, which names the rule and says its message)
#: tells the model that the tool's policy refuses the call and that the same call is refused again.
MESSAGE_POLICY_DENIED = (
    "The tool's policy refuses this call: {message}. Calling the tool again with the same arguments "
    "will be refused again: tell the user, and do not try to get around the rule."
)
#: MESSAGE_LIMIT_EXCEEDED (with the ledger's refusal) tells the model that a budget of the tools
#: file refused the call.
MESSAGE_LIMIT_EXCEEDED = (
    "This call was not made: {message}. Nothing was recorded; the same call may be accepted once the "
    "limit's window has room again, but do not split or change it to get around the limit: tell the user."
)
#: MESSAGE_OPERATION_DUPLICATE (with the other call's state, as state_words gives it) tells the
#: model that the same action (the tool's business identity) is already recorded under another key.
MESSAGE_OPERATION_DUPLICATE = (
    "This call was not made: the same action is already recorded as another call, operation_id, which "
    "is {state}. Do not make it again, under this key or another; call check_operation with that "
    "operation_id to learn its outcome."
)
#: MAX_POLICY_SUMMARY is the longest Policy.summary (in characters) model_description adds to a
#: tool's description; a longer one is left to ListTools.
MAX_POLICY_SUMMARY = 300

_VERBS = {
    "succeeded": "this ran",
    "failed": "this did not take effect",
    "outcome_unknown": "this was sent, and its outcome is not known yet",
    "awaiting_approval": "this awaits approval",
}

_ABSENT = object()


@dataclass(frozen=True)
class Change:
    """Change is one argument an approver changed: ``old`` is its value in the call as made (none
    when ``added``), ``new`` the value that ran (none when ``removed``)."""

    field: str
    old: Any = None
    new: Any = None
    added: bool = False
    removed: bool = False


@dataclass(frozen=True)
class Edit:
    """Edit is an approver's change of a call's arguments (approve-with-edit, docs/policy.md): the
    outcome's operation is the edited one, which the runner followed the link to
    (Operation.superseded_by) and ran. ``supersedes`` is the call as made, REJECTED, which never
    runs; ``args`` what ran; ``changes`` the fields the approver changed, in canonical JSON order."""

    supersedes: str
    args: Dict[str, Any]
    changes: Tuple[Change, ...]

    @staticmethod
    def of(supersedes: str, original: Mapping[str, Any], args: Mapping[str, Any]) -> "Edit":
        """of describes the edit from the arguments of the call as made to args."""
        changes = []
        for name in sorted(set(original) | set(args), key=lambda k: k.encode("utf-16-be")):
            old, new = original.get(name, _ABSENT), args.get(name, _ABSENT)
            if old is not _ABSENT and new is not _ABSENT and canonicalize(old) == canonicalize(new):
                continue
            changes.append(
                Change(
                    field=name,
                    old=None if old is _ABSENT else old,
                    new=None if new is _ABSENT else new,
                    added=old is _ABSENT,
                    removed=new is _ABSENT,
                )
            )
        return Edit(supersedes=supersedes, args=dict(args), changes=tuple(changes))

    def message(self, status: str, operation_id: str) -> str:
        """message is the sentence for_model gives the model about the edit (MESSAGE_EDITED), for an
        outcome of that status about operation operation_id."""
        parts = [
            "{} from {} to {}".format(
                c.field,
                "nothing" if c.added else canonicalize(c.old),
                "nothing" if c.removed else canonicalize(c.new),
            )
            for c in self.changes
        ]
        return MESSAGE_EDITED.format(
            changes=", ".join(parts) or "nothing",
            verb=_VERBS.get(status, ""),
            args=canonicalize(self.args),
            operation_id=operation_id,
            supersedes=self.supersedes,
        )

    def for_model(self, status: str, operation_id: str) -> Dict[str, Any]:
        """for_model is the edit as for_model's "edited" member: {"args", "changes": [{"field",
        "from", "to"}], "message", "supersedes"}."""
        changes = []
        for c in self.changes:
            m: Dict[str, Any] = {"field": c.field}
            if not c.added:
                m["from"] = c.old
            if not c.removed:
                m["to"] = c.new
            changes.append(m)
        return {
            "args": self.args,
            "changes": changes,
            "message": self.message(status, operation_id),
            "supersedes": self.supersedes,
        }


def refusal_message(reason: str, message: str) -> str:
    """refusal_message is what a runner tells the model about a refusal of the call with that
    reason and ledger message: the message itself, or for POLICY_DENIED and LIMIT_EXCEEDED the
    message with what it means for the model."""
    if reason == "POLICY_DENIED":
        return MESSAGE_POLICY_DENIED.format(message=message)
    if reason == "LIMIT_EXCEEDED":
        return MESSAGE_LIMIT_EXCEEDED.format(message=message)
    return message


def model_description(description: str, summary: Optional[str]) -> str:
    """model_description is a tool's description for a model: the tools file's description, then
    the policy's plain-words summary (Policy.summary) when there is one of at most
    MAX_POLICY_SUMMARY characters, as "\\n\\nPolicy: <summary>."."""
    if not summary or len(summary) > MAX_POLICY_SUMMARY:
        return description
    if not description:
        return "Policy: " + summary + "."
    return description + "\n\nPolicy: " + summary + "."
