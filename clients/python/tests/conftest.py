"""Shared fixtures: the server started by clients/run-server.sh (its env file exported into the
environment) and the repository's fingerprint vectors."""

import json
import os
import urllib.request
from pathlib import Path

import pytest

import opledger

REPO = Path(__file__).resolve().parents[3]


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        if os.environ.get("OPLEDGER_REQUIRE_SERVER") == "1":
            pytest.fail(f"{name} is not set and OPLEDGER_REQUIRE_SERVER=1")
        pytest.skip(f"{name} is not set: run clients/test.sh (or source the env file of clients/run-server.sh)")
    return value


@pytest.fixture(scope="session")
def addr() -> str:
    return _env("OPLEDGER_ADDR")


@pytest.fixture()
def agent(addr):
    with opledger.Client(addr, _env("AGENT_KEY"), plaintext=True) as c:
        yield c


@pytest.fixture()
def approver(addr):
    with opledger.Client(addr, _env("APPROVER_KEY"), plaintext=True) as c:
        yield c


@pytest.fixture()
def other_agent(addr):
    with opledger.Client(addr, _env("OTHER_AGENT_KEY"), plaintext=True) as c:
        yield c


@pytest.fixture(scope="session")
def fakepay_url() -> str:
    return _env("FAKEPAY_URL").rstrip("/")


@pytest.fixture()
def faults(fakepay_url):
    """faults(body) replaces the fake processor's faults until the test ends (they are global:
    the suites run one after another, and the tests of this suite too)."""

    def set_faults(body=None):
        req = urllib.request.Request(
            fakepay_url + "/admin/faults",
            data=json.dumps(body).encode() if body is not None else None,
            method="PUT" if body is not None else "DELETE",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200

    yield set_faults
    set_faults(None)


@pytest.fixture()
def emails(fakepay_url):
    """emails(to) counts the fake processor's mails to one address."""

    def count(to: str) -> int:
        with urllib.request.urlopen(fakepay_url + "/emails", timeout=10) as resp:
            data = json.load(resp)["data"]
        return sum(1 for e in data if e.get("to") == to)

    return count


@pytest.fixture()
def charges():
    """charges(invoice_id) counts the fake processor's charges for one invoice."""
    url = _env("FAKEPAY_URL").rstrip("/") + "/charges"

    def count(invoice_id: str) -> int:
        with urllib.request.urlopen(url, timeout=10) as resp:
            data = json.load(resp)["data"]
        return sum(1 for ch in data if ch.get("invoice_id") == invoice_id)

    return count


@pytest.fixture()
def amounts(fakepay_url):
    """amounts(invoice_id) lists the fake processor's charges of one invoice by amount."""

    def of(invoice_id: str) -> list:
        with urllib.request.urlopen(fakepay_url + "/charges", timeout=10) as resp:
            data = json.load(resp)["data"]
        return [ch["amount_minor"] for ch in data if ch.get("invoice_id") == invoice_id]

    return of


@pytest.fixture()
def edit(approver):
    """edit(operation_id, amount_minor) approves the operation with amount_minor changed, as a person
    at the console would (the approver's key; the refund tool of clients/testdata/policy_tools.yaml
    lets an approver edit amount_minor), and returns the edited operation."""

    def approve_edited(operation_id: str, amount_minor: int):
        op = approver.get(operation_id).operation
        edited = {**opledger.struct_to_dict(op.args), "amount_minor": amount_minor}
        resp = approver.approve_edited(op.id, op.fingerprint, edited, "less is enough")
        assert resp.operation.superseded_by == resp.edited.id
        return resp.edited

    return approve_edited


@pytest.fixture(scope="session")
def vectors():
    path = Path(os.environ.get("OPLEDGER_VECTORS", REPO / "clients" / "go" / "fingerprint" / "testdata" / "vectors.json"))
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["version"] == "v1"
    return doc["vectors"]
