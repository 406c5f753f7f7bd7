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
    with opledger.Client(addr, _env("AGENT_KEY")) as c:
        yield c


@pytest.fixture()
def approver(addr):
    with opledger.Client(addr, _env("APPROVER_KEY")) as c:
        yield c


@pytest.fixture()
def other_agent(addr):
    with opledger.Client(addr, _env("OTHER_AGENT_KEY")) as c:
        yield c


@pytest.fixture()
def charges():
    """charges(invoice_id) counts the fake processor's charges for one invoice."""
    url = _env("FAKEPAY_URL").rstrip("/") + "/charges"

    def count(invoice_id: str) -> int:
        with urllib.request.urlopen(url, timeout=10) as resp:
            data = json.load(resp)["data"]
        return sum(1 for ch in data if ch.get("invoice_id") == invoice_id)

    return count


@pytest.fixture(scope="session")
def vectors():
    path = Path(os.environ.get("OPLEDGER_VECTORS", REPO / "clients" / "go" / "fingerprint" / "testdata" / "vectors.json"))
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["version"] == "v1"
    return doc["vectors"]
