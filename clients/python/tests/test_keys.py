import json
from pathlib import Path

import pytest

from opledger import derive_idempotency_key, key_preimage

# The normative vectors of docs/fingerprint.md, "Idempotency key derivation"; the Go, Java and
# TypeScript clients check the same file, so all four derive the same keys.
REPO = Path(__file__).resolve().parents[3]
with open(REPO / "clients" / "go" / "fingerprint" / "testdata" / "key_vectors.json", encoding="utf-8") as _f:
    _DOC = json.load(_f)
KEY_VECTORS = _DOC["vectors"]


def _args(vec):
    return (vec["conversation"], vec["round"], vec["tool_call"], vec["tool"], vec["tool_version"])


def test_key_vectors_file():
    assert _DOC["version"] == "opk1"
    assert len(KEY_VECTORS) >= 3


@pytest.mark.parametrize("vec", KEY_VECTORS, ids=[v["name"] for v in KEY_VECTORS])
def test_key_vector(vec):
    assert key_preimage(*_args(vec)).encode("utf-8") == vec["canonical"].encode("utf-8")
    assert derive_idempotency_key(*_args(vec)) == vec["key"]


def test_none_is_empty_string():
    assert derive_idempotency_key("w", 0, None, "t", None) == derive_idempotency_key("w", 0, "", "t", "")
    assert derive_idempotency_key("w", 0, "c", "t") == derive_idempotency_key("w", 0, "c", "t", "")


def test_stable_and_bounded():
    a = derive_idempotency_key("conv-42", 3, "call_123", "pay_invoice", "1")
    b = derive_idempotency_key("conv-42", 3, "call_123", "pay_invoice", "1")
    assert a == b
    assert a.startswith("opk1-")
    assert len(a) == 48
    assert all(33 <= ord(c) <= 126 for c in a)


def test_every_part_matters():
    base = ("conv-42", 3, "call_123", "pay_invoice", "1")
    keys = {derive_idempotency_key(*base)}
    for i, other in enumerate(["conv-43", 4, "call_124", "send_email", "2"]):
        parts = list(base)
        parts[i] = other
        keys.add(derive_idempotency_key(*parts))
    assert len(keys) == 6
    # Parts are delimited (JSON object members), so shifting a boundary changes the key.
    assert derive_idempotency_key("a:b", 1, "c", "t") != derive_idempotency_key("a", 1, "b:c", "t")


def test_long_and_unicode_parts_stay_bounded():
    k = derive_idempotency_key("ü" * 10_000, 2**53 - 1, "😀" * 500, "pay_invoice", None)
    assert len(k) == 48 and k.isascii() and k.isprintable()


@pytest.mark.parametrize("round_", ["3", True, False, 3.0, None, 2**53, -(2**53), 10**30])
def test_round_must_be_a_safe_int(round_):
    with pytest.raises(TypeError):
        derive_idempotency_key("w", round_, "c", "t")


@pytest.mark.parametrize(
    "args",
    [("", 1, "c", "t"), ("w", 1, "c", ""), ("w", -1, "c", "t"), ("w\ud800", 1, "c", "t")],
    ids=["empty-workflow", "empty-tool", "negative-round", "lone-surrogate"],
)
def test_invalid_parts_refused(args):
    with pytest.raises(ValueError):
        derive_idempotency_key(*args)
