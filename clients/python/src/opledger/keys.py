"""keys derives Prepare idempotency keys from an agent runtime's own workflow state.

An idempotency key is the business identity of an operation: every retry of the same intended
action must send the same key, and a second legitimate action (a second $25 purchase) needs
another one. A key derived from stable, trusted parts of the runtime's state gives both without
storing anything extra.

The recipe ("opk1") is the normative one of docs/fingerprint.md, "Idempotency key derivation",
shared by every opledger client (Go, Java, Python, TypeScript) and checked against
clients/go/fingerprint/testdata/key_vectors.json, so every language derives the same key from the same parts.

Caveat: a model provider's tool-call id is not a business identity. It matches a tool result to
one model response, but a regenerated response (a retried model round, another provider) may
carry a new call id for the same action, and a key built from it would then pay twice. Derive
the key from state your runtime owns and persists (a conversation or workflow id, the round or
step it is in, an id your application assigned to the intended action) and persist the key
before calling Prepare. Pass the provider's call id only where your runtime has already pinned
it (e.g. stored the model's response before executing any of its calls); otherwise pass "".
"""

from __future__ import annotations

import base64
import hashlib
from typing import Optional

from .fingerprint import canonicalize

#: KEY_PREFIX marks keys made by derive_key (and the version of its recipe).
KEY_PREFIX = "opk1-"

# _MAX_ROUND is the largest integer every language's JSON number (an IEEE-754 double) holds
# exactly; beyond it two rounds could canonicalize to the same text.
_MAX_ROUND = 2**53 - 1


def key_preimage(
    *,
    conversation: str,
    round: int,
    tool: str,
    tool_call: Optional[str] = "",
    tool_version: Optional[str] = "",
) -> str:
    """key_preimage returns the RFC 8785 canonical JSON text that derive_key hashes (encode it as
    UTF-8), for checking this client against the shared test vectors or another implementation.
    It takes and validates the same keyword arguments as derive_key."""
    if not conversation:
        raise ValueError("conversation must not be empty")
    if not tool:
        raise ValueError("tool must not be empty")
    # bool is an int subclass, and a str round ("3") would be a different JSON value than 3:
    # both are refused rather than silently converted.
    if isinstance(round, bool) or not isinstance(round, int):
        raise TypeError(f"round must be an int, not {type(round).__name__}")
    if abs(round) > _MAX_ROUND:
        raise TypeError("round must be a safe integer (|round| <= 2**53 - 1)")
    if round < 0:
        raise ValueError("round must not be negative")
    parts = {
        "conversation": conversation,
        "round": round,
        "tool_call": tool_call or "",
        "tool": tool,
        "tool_version": tool_version or "",
    }
    for name, value in parts.items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                # A lone surrogate has no UTF-8 form, so no other client could derive this key.
                raise ValueError(f"{name} is not valid Unicode (a lone surrogate)") from None
    return canonicalize(parts)


def derive_key(
    *,
    conversation: str,
    round: int,
    tool: str,
    tool_call: Optional[str] = "",
    tool_version: Optional[str] = "",
) -> str:
    """derive_key returns a stable idempotency key for one intended tool call.

    The key is "opk1-" + base64url without padding of SHA-256 over the UTF-8 bytes of the
    RFC 8785 (JCS) canonical form of {"conversation", "round", "tool_call", "tool",
    "tool_version"} (docs/fingerprint.md, "Idempotency key derivation"). It is always 48
    printable ASCII characters, well inside opledger's 255, the same in every process and every
    opledger client language (Go client.DeriveKey, Java IdempotencyKeys.derive, TypeScript
    deriveKey), and it reveals none of its parts. The arguments are keyword-only, with the same
    names in every client, so that two strings cannot be swapped by position.

    Args:
        conversation: the runtime's own durable id of the conversation, workflow or operation;
            must not be empty.
        round: the model round (turn, step) within it: an int with 0 <= round <= 2**53 - 1.
        tool: the tool, e.g. "pay_invoice"; must not be empty.
        tool_call: the call's id within the round, or "" (None counts as ""); see the module
            caveat about provider ids.
        tool_version: the version sent in the Prepare request, or "" (None) when none is sent.

    Raises:
        ValueError: conversation or tool is empty, round is negative, or a part is not valid
            Unicode (a lone surrogate).
        TypeError: round is not an int (a str or a bool included) or not a safe integer.
    """
    text = key_preimage(
        conversation=conversation, round=round, tool=tool, tool_call=tool_call, tool_version=tool_version
    )
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return KEY_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")
