import json
from pathlib import Path

import pytest

from opledger import derive_key, key_preimage

# The normative vectors of docs/fingerprint.md, "Idempotency key derivation"; the Go, Java and
# TypeScript clients check the same file, so all four derive the same keys.
REPO = Path(__file__).resolve().parents[3]
with open(REPO / "clients" / "go" / "fingerprint" / "testdata" / "key_vectors.json", encoding="utf-8") as _f:
    _DOC = json.load(_f)
KEY_VECTORS = _DOC["vectors"]


def _parts(vec):
    return {k: vec[k] for k in ("conversation", "round", "tool_call", "tool", "tool_version")}


def derive(conversation, round_, tool_call, tool, tool_version=""):
    """derive is derive_key by position, to keep the table-driven tests below short."""
    return derive_key(conversation=conversation, round=round_, tool_call=tool_call, tool=tool, tool_version=tool_version)


def test_key_vectors_file():
    assert _DOC["version"] == "opk1"
    assert len(KEY_VECTORS) >= 3


@pytest.mark.parametrize("vec", KEY_VECTORS, ids=[v["name"] for v in KEY_VECTORS])
def test_key_vector(vec):
    assert key_preimage(**_parts(vec)).encode("utf-8") == vec["canonical"].encode("utf-8")
    assert derive_key(**_parts(vec)) == vec["key"]


def test_parts_are_keyword_only():
    with pytest.raises(TypeError):
        derive_key("conv", 1, "pay_invoice")  # type: ignore[misc]
    assert derive_key(conversation="conv_7f3a9c", round=3, tool_call="call_Qx81ZpT0", tool="pay_invoice", tool_version="1") == (
        "opk1-rJkGVvywp6LW6RR0IMujcmLimnINH4FvCE5fePK7Odc"
    )


def test_none_is_empty_string():
    assert derive("w", 0, None, "t", None) == derive("w", 0, "", "t", "")
    assert derive("w", 0, "c", "t") == derive("w", 0, "c", "t", "")


def test_stable_and_bounded():
    a = derive("conv-42", 3, "call_123", "pay_invoice", "1")
    b = derive("conv-42", 3, "call_123", "pay_invoice", "1")
    assert a == b
    assert a.startswith("opk1-")
    assert len(a) == 48
    assert all(33 <= ord(c) <= 126 for c in a)


def test_every_part_matters():
    base = ("conv-42", 3, "call_123", "pay_invoice", "1")
    keys = {derive(*base)}
    for i, other in enumerate(["conv-43", 4, "call_124", "send_email", "2"]):
        parts = list(base)
        parts[i] = other
        keys.add(derive(*parts))
    assert len(keys) == 6
    # Parts are delimited (JSON object members), so shifting a boundary changes the key.
    assert derive("a:b", 1, "c", "t") != derive("a", 1, "b:c", "t")


def test_long_and_unicode_parts_stay_bounded():
    k = derive("ü" * 10_000, 2**53 - 1, "😀" * 500, "pay_invoice", None)
    assert len(k) == 48 and k.isascii() and k.isprintable()


@pytest.mark.parametrize("round_", ["3", True, False, 3.0, None, 2**53, -(2**53), 10**30])
def test_round_must_be_a_safe_int(round_):
    with pytest.raises(TypeError):
        derive("w", round_, "c", "t")


@pytest.mark.parametrize(
    "args",
    [("", 1, "c", "t"), ("w", 1, "c", ""), ("w", -1, "c", "t"), ("w\ud800", 1, "c", "t")],
    ids=["empty-workflow", "empty-tool", "negative-round", "lone-surrogate"],
)
def test_invalid_parts_refused(args):
    with pytest.raises(ValueError):
        derive(*args)
