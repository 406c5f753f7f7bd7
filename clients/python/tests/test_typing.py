"""mypy --strict on the installed package and on the documented usage: every Python snippet of
docs/clients/python.md and the example, checked the way a user's own code would be."""

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DOC = REPO / "docs" / "clients" / "python.md"


def mypy(*args: str) -> str:
    out, err, status = mypy_api.run(["--strict", "--no-error-summary", *args])
    assert status in (0, 1), err
    return out + err


def test_package_is_strict_clean(tmp_path):
    # The installed package, as users get it (the generated modules are excluded in pyproject.toml).
    out = mypy("--config-file", str(HERE.parent / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"), "-p", "opledger")
    assert out == "", out


def doc_snippets():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_documented_usage_is_strict_clean(tmp_path):
    snippets = doc_snippets()
    assert len(snippets) >= 5
    files = []
    for i, code in enumerate(snippets):
        f = tmp_path / f"doc_snippet_{i}.py"
        f.write_text(code, encoding="utf-8")
        files.append(str(f))
    files.append(str(HERE.parent / "examples" / "agent_loop.py"))
    out = mypy("--cache-dir", str(tmp_path / "cache"), *files)
    assert out == "", out


def test_mypy_would_catch_a_wrong_name(tmp_path):
    # The control: the check above is not vacuous.
    f = tmp_path / "wrong.py"
    f.write_text("import opledger\ntry:\n    pass\nexcept opledger.IdempotencyKeyReusedd:\n    pass\n", encoding="utf-8")
    out = mypy("--cache-dir", str(tmp_path / "cache"), str(f))
    assert 'has no attribute "IdempotencyKeyReusedd"' in out
