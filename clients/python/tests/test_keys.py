import pytest

from opledger import derive_idempotency_key

# The same value is asserted by the TypeScript client's tests: the recipe is language-neutral.
CROSS_LANGUAGE = ("conv-42", 3, "call_123", "pay_invoice", "1")
CROSS_LANGUAGE_KEY = "opk1-5uNHHgDdpWE12vxWLFwLTXrj7BApOgGgedYY0-UHRIg"


def test_stable_and_bounded():
    a = derive_idempotency_key("conv-42", 3, "call_123", "pay_invoice", "1")
    b = derive_idempotency_key("conv-42", 3, "call_123", "pay_invoice", "1")
    assert a == b
    assert a.startswith("opk1-")
    assert len(a) == 48
    assert all(33 <= ord(c) <= 126 for c in a)


def test_cross_language_value():
    assert derive_idempotency_key(*CROSS_LANGUAGE) == CROSS_LANGUAGE_KEY


def test_round_as_int_or_str_is_the_same():
    assert derive_idempotency_key("w", 3, "c", "t") == derive_idempotency_key("w", "3", "c", "t")


def test_every_part_matters():
    base = ("conv-42", 3, "call_123", "pay_invoice", "1")
    keys = {derive_idempotency_key(*base)}
    for i, other in enumerate(["conv-43", 4, "call_124", "send_email", "2"]):
        parts = list(base)
        parts[i] = other
        keys.add(derive_idempotency_key(*parts))
    assert len(keys) == 6
    # Parts are length-delimited (JSON array), so shifting a boundary changes the key.
    assert derive_idempotency_key("a:b", 1, "c", "t") != derive_idempotency_key("a", 1, "b:c", "t")


def test_long_and_unicode_parts_stay_bounded():
    k = derive_idempotency_key("ü" * 10_000, 10**30, "😀" * 500, "pay_invoice", None)
    assert len(k) == 48 and k.isascii() and k.isprintable()


@pytest.mark.parametrize("args", [("", 1, "c", "t"), ("w", 1, "c", "")])
def test_empty_workflow_or_tool_refused(args):
    with pytest.raises(ValueError):
        derive_idempotency_key(*args)
