"""hatch_build adds the generated opledger.v1 modules from gen/python to the wheel and the sdist.

The generated code is committed once, at the repository's gen/python, and shared by every
consumer; copying it into this package would let the two drift. A wheel built from the source
tree takes it from there; a wheel built from an sdist takes the copy the sdist carries in
src/opledger/v1.
"""

from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    """CustomBuildHook maps gen/python/opledger/v1/*.py[i] into the built artifact."""

    def initialize(self, version, build_data):
        root = Path(self.root)
        gen = (root / ".." / ".." / "gen" / "python" / "opledger" / "v1").resolve()
        files = sorted(p for p in gen.glob("*.py*") if p.suffix in (".py", ".pyi")) if gen.is_dir() else []
        if not files:
            if (root / "src" / "opledger" / "v1" / "ledger_pb2.py").is_file():
                return  # building from an sdist, which already carries them
            raise RuntimeError(f"generated code not found at {gen}: build from the opledger repository")
        dest = "opledger/v1" if self.target_name == "wheel" else "src/opledger/v1"
        for f in files:
            build_data["force_include"][str(f)] = f"{dest}/{f.name}"
