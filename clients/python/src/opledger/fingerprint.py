"""fingerprint computes opledger's v1 operation fingerprint, exactly as the server does.

The fingerprint is "v1:" + hex(SHA-256(JCS(preimage))) with the preimage
``{"args": …, "method": …, "tenant": …, "tool": …, "tool_version": …, "v": 1}`` and JCS the RFC
8785 JSON canonicalization (docs/fingerprint.md). An approval screen recomputes it from the
arguments it shows and sends it with Approve, so an approval can only ever apply to exactly
those arguments.

Numbers travel in a google.protobuf.Struct as IEEE-754 doubles, so every number is converted to
a float before it is written (an int above 2**53 is rounded, as protobuf rounds it).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Dict, List, Mapping, Optional

from google.protobuf import json_format, struct_pb2

#: PREPARE_METHOD is the gRPC method that a v1 fingerprint covers.
PREPARE_METHOD = "/opledger.v1.LedgerService/Prepare"

#: FINGERPRINT_PREFIX names the canonical form; a client must not recompute other prefixes.
FINGERPRINT_PREFIX = "v1:"

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def canonicalize(value: Any) -> str:
    """canonicalize returns the RFC 8785 (JCS) text of a JSON value made of dict, list, str,
    int, float, bool and None. Numbers are written as the IEEE-754 double they round to; NaN and
    infinities raise ValueError. Encode the result as UTF-8 before hashing."""
    out: List[str] = []
    _write(value, out)
    return "".join(out)


def _write(v: Any, out: List[str]) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_string(v))
    elif isinstance(v, (int, float)):
        out.append(format_number(float(v)))
    elif isinstance(v, Mapping):
        for k in v:
            if not isinstance(k, str):
                raise TypeError(f"JSON object keys must be strings, not {type(k).__name__}")
        # JCS orders members by their names as UTF-16 code units; big-endian UTF-16 bytes compare
        # the same way (and differ from code point order for characters above U+FFFF).
        keys = sorted(v, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        out.append("{")
        for i, k in enumerate(keys):
            if i:
                out.append(",")
            out.append(_string(k))
            out.append(":")
            _write(v[k], out)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"not a JSON value: {type(v).__name__}")


def _string(s: str) -> str:
    parts = ['"']
    for ch in s:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            parts.append(esc)
        elif ch < " ":
            parts.append(f"\\u{ord(ch):04x}")
        else:
            parts.append(ch)
    parts.append('"')
    return "".join(parts)


def format_number(x: float) -> str:
    """format_number writes a double as ECMAScript's Number.prototype.toString does (the
    number serialization RFC 8785 requires): the shortest round-tripping digits, plain notation
    for 1e-6 <= |x| < 1e21, exponent notation ("1e+21", "1e-7") outside; -0 is "0"."""
    if math.isnan(x) or math.isinf(x):
        raise ValueError("NaN and infinities are not JSON numbers")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    # repr() gives the shortest digits that round-trip (David Gay's algorithm), the same digits
    # ECMAScript chooses; only the layout differs.
    mantissa, _, exp = repr(abs(x)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    all_digits = int_part + frac_part
    stripped = all_digits.lstrip("0")
    # n: the decimal exponent such that value = 0.DIGITS × 10**n.
    n = len(int_part) + (int(exp) if exp else 0) - (len(all_digits) - len(stripped))
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    e_text = ("+" if e >= 0 else "-") + str(abs(e))
    if k == 1:
        return sign + digits + "e" + e_text
    return sign + digits[0] + "." + digits[1:] + "e" + e_text


def preimage(
    tool: str,
    args: Optional[Mapping[str, Any]],
    tenant: str,
    tool_version: str,
    method: str = PREPARE_METHOD,
) -> str:
    """preimage returns the canonical text that the v1 fingerprint hashes. ``tool_version`` must
    be the resolved version (Operation.tool_version), not an empty request field."""
    for name, value in (("method", method), ("tenant", tenant), ("tool", tool), ("tool_version", tool_version)):
        if not value:
            raise ValueError(f"{name} must not be empty")
    return canonicalize(
        {
            "args": {} if args is None else args,
            "method": method,
            "tenant": tenant,
            "tool": tool,
            "tool_version": tool_version,
            "v": 1,
        }
    )


def compute_fingerprint(
    tool: str,
    args: Optional[Mapping[str, Any]],
    tenant: str,
    tool_version: str,
    method: str = PREPARE_METHOD,
) -> str:
    """compute_fingerprint returns the v1 fingerprint ("v1:" + 64 hex digits) of a Prepare of
    ``tool`` at ``tool_version`` with ``args`` in ``tenant``."""
    text = preimage(tool, args, tenant, tool_version, method)
    return FINGERPRINT_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def operation_fingerprint(operation: Any) -> str:
    """operation_fingerprint recomputes the v1 fingerprint of an opledger.v1.Operation from its
    tenant, tool, tool_version and args: what an approval screen shows is what it approves."""
    args = json_format.MessageToDict(operation.args) if operation.HasField("args") else {}
    return compute_fingerprint(operation.tool, args, operation.tenant, operation.tool_version)


def struct_to_dict(s: struct_pb2.Struct) -> Dict[str, Any]:
    """struct_to_dict converts a google.protobuf.Struct (Operation.args, Operation.result) into
    a plain dict; numbers come back as floats."""
    d: Dict[str, Any] = json_format.MessageToDict(s)
    return d
