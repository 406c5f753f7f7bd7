"""keys derives Prepare idempotency keys from an agent runtime's own workflow state.

An idempotency key is the business identity of an operation: every retry of the same intended
action must send the same key, and a second legitimate action (a second $25 purchase) needs
another one. A key derived from stable, trusted parts of the runtime's state gives both without
storing anything extra.

Caveat: a model provider's tool-call id is not a business identity. It matches a tool result to
one model response, but a regenerated response (a retried model round, another provider) may
carry a new call id for the same action, and a key built from it would then pay twice. Derive
the key from state your runtime owns and persists (a workflow or conversation id, the step or
round it is in, an id your application assigned to the intended action) and persist the key
before calling Prepare. Pass the provider's call id only where your runtime has already pinned
it (e.g. stored the model's response before executing any of its calls).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Optional, Union

from .fingerprint import canonicalize

#: KEY_PREFIX marks keys made by derive_idempotency_key (and the version of its recipe).
KEY_PREFIX = "opk1-"


def derive_idempotency_key(
    workflow_id: str,
    model_round: Union[int, str],
    tool_call_id: str,
    tool_name: str,
    tool_version: Optional[str] = None,
) -> str:
    """derive_idempotency_key returns a stable key for one intended tool call.

    The key is "opk1-" followed by the first 43 characters of base64url(SHA-256(JCS of the
    parts)): 48 printable ASCII characters, well inside opledger's 255, the same in every
    process and every client language that follows the recipe (docs/clients/python.md), and it
    reveals none of its parts.

    Args:
        workflow_id: the runtime's own durable id for the conversation, workflow or operation.
        model_round: the round or step of that workflow the call belongs to.
        tool_call_id: the call's id within the round; see the module caveat about provider ids.
        tool_name: the tool, e.g. "pay_invoice".
        tool_version: the tool's version, or None / "" for "unspecified".
    """
    if not workflow_id:
        raise ValueError("workflow_id must not be empty")
    if not tool_name:
        raise ValueError("tool_name must not be empty")
    if isinstance(model_round, bool) or not isinstance(model_round, (int, str)):
        raise TypeError("model_round must be an int or a str")
    parts = [
        "opledger-idempotency-key/v1",
        workflow_id,
        str(model_round),
        tool_call_id or "",
        tool_name,
        tool_version or "",
    ]
    digest = hashlib.sha256(canonicalize(parts).encode("utf-8")).digest()
    return KEY_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")[:43]
