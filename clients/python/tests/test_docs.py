"""Every Python snippet of docs/clients/python.md runs as it is against the server (each in its
own interpreter, with the server's variables), so the page cannot drift from the client."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "clients" / "python.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("code", SNIPPETS, ids=[f"snippet_{i}" for i in range(len(SNIPPETS))])
def test_snippet_runs(code, addr, tmp_path):
    f = tmp_path / "snippet.py"
    f.write_text(code, encoding="utf-8")
    run = subprocess.run([sys.executable, str(f)], capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert run.returncode == 0, f"{code}\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
