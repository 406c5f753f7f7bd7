import json
from pathlib import Path

import pytest

import opledger
from opledger.fingerprint import format_number
from opledger.v1 import ledger_pb2

REPO = Path(__file__).resolve().parents[3]
with open(REPO / "clients" / "go" / "fingerprint" / "testdata" / "vectors.json", encoding="utf-8") as _f:
    VECTORS = json.load(_f)["vectors"]


@pytest.mark.parametrize("vec", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vec):
    pre = opledger.preimage(vec["tool"], vec["args"], vec["tenant"], vec["tool_version"], vec["method"])
    assert pre.encode("utf-8") == vec["canonical"].encode("utf-8")
    fp = opledger.compute_fingerprint(vec["tool"], vec["args"], vec["tenant"], vec["tool_version"], vec["method"])
    assert fp == vec["fingerprint"]


def test_vectors_fixture_has_them_all(vectors):
    assert len(vectors) == len(VECTORS) >= 19


@pytest.mark.parametrize(
    "value,text",
    [
        (0.0, "0"),
        (-0.0, "0"),
        (4900, "4900"),
        (4.5, "4.5"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (999999999999999900000.0, "999999999999999900000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (-1.2e-7, "-1.2e-7"),
        (1.5e300, "1.5e+300"),
        (5e-324, "5e-324"),
        (123.456, "123.456"),
        (2**53 + 1, "9007199254740992"),
        (1e16, "10000000000000000"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_format_number(value, text):
    assert format_number(float(value)) == text


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused(bad):
    with pytest.raises(ValueError):
        opledger.canonicalize({"x": bad})


def test_operation_fingerprint_from_a_message():
    vec = VECTORS[0]
    op = ledger_pb2.Operation(tool=vec["tool"], tool_version=vec["tool_version"], tenant=vec["tenant"])
    op.args.update(vec["args"])
    assert opledger.operation_fingerprint(op) == vec["fingerprint"]


def test_empty_fields_are_refused():
    with pytest.raises(ValueError):
        opledger.compute_fingerprint("pay_invoice", {}, "demo", "")
