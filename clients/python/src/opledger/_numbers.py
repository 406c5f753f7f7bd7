"""_numbers refuses a number a double cannot carry as written.

Tool-call arguments travel to the ledger as a google.protobuf.Struct, whose numbers are IEEE-754
doubles, so 9007199254740993 would arrive as 9007199254740992 and 12.00000000000000000001 as 12,
silently. A number whose double, in its shortest form (what the ledger's canonical JSON sends on),
is not the number written is refused before anything is sent, as every opledger client does
(clients/testdata/inexact_numbers.json).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any, Dict

_MAX_LITERAL = 1024  # a double has at most 17 significant digits


def check_literal(literal: str) -> None:
    """check_literal raises ValueError when the JSON number ``literal`` is not the number its
    double's shortest form denotes. A number beyond the double's range is left to the ledger."""
    value = float(literal)
    if math.isinf(value):
        return
    carried = repr(value)
    if len(literal) <= _MAX_LITERAL and Decimal(literal) == Decimal(carried):
        return
    raise ValueError(
        f"the number {literal} cannot travel exactly (the ledger's numbers are IEEE-754 doubles, "
        f"and it would arrive as {carried}): send it as a string"
    )


def check_value(value: Any) -> None:
    """check_value raises ValueError for the first integer in ``value`` (a mapping's values,
    nested) that a double cannot carry. Floats are doubles already."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -(2**53) <= value <= 2**53:
            check_literal(str(value))
    elif isinstance(value, dict) or hasattr(value, "items"):
        for v in value.values():
            check_value(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            check_value(v)


def _int(literal: str) -> int:
    check_literal(literal)
    return int(literal)


def _float(literal: str) -> float:
    check_literal(literal)
    return float(literal)


def _object(pairs: Any) -> Dict[str, Any]:
    obj: Dict[str, Any] = {}
    for name, value in pairs:
        if name in obj:
            raise ValueError(f"the member {name!r} appears twice in one object: which one counts is not defined")
        obj[name] = value
    return obj


def loads(text: str) -> Dict[str, Any]:
    """loads parses a model's JSON arguments, refusing (ValueError) a number a double cannot
    carry, the first in the text, and a member name given twice in one object."""
    parsed: Any = json.loads(text, parse_int=_int, parse_float=_float, object_pairs_hook=_object)
    return parsed  # type: ignore[no-any-return]
