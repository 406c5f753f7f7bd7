"""A number a double cannot carry as written is refused before anything is sent, as in every
opledger client: clients/testdata/inexact_numbers.json."""

import json
from pathlib import Path

import pytest

import opledger
from opledger import _numbers as numbers

REPO = Path(__file__).resolve().parents[3]
with open(REPO / "clients" / "testdata" / "inexact_numbers.json", encoding="utf-8") as _f:
    VECTORS = json.load(_f)["vectors"]


@pytest.mark.parametrize("vec", VECTORS, ids=[v["args"] for v in VECTORS])
def test_inexact_number_vectors(vec):
    if vec["refused"] is None:
        assert numbers.loads(vec["args"]) == json.loads(vec["args"])
        return
    with pytest.raises(ValueError, match=vec["refused"]):
        numbers.loads(vec["args"])


def test_prepare_refuses_an_integer_a_double_cannot_carry():
    """A mapping's integer is checked too: nothing is sent (the client never dials)."""
    c = opledger.Client("127.0.0.1:1", "k", plaintext=True)
    with pytest.raises(ValueError, match="1234567890123456789"):
        c.prepare("pay", {"lines": [{"id": 1234567890123456789}]}, "k-1")
    c.close()
