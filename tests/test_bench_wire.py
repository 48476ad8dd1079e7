"""bench.wire measures each side with its own tree's protocol modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent


def test_each_side_imports_the_protocol_from_its_own_tree(tmp_path: Path) -> None:
    # The other side was its wire.py alone, over this tree's stalls.py, headers.py and
    # refusals.py: a change to those was measured on both sides.
    shutil.copytree(TREE / "app", tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__"))

    done = subprocess.run(
        [sys.executable, "-m", "bench.wire", "--against", str(tmp_path / "app/cli/wire.py")]
        # One case: each case imports the same protocol modules, and the chunked
        # bodies' four cases (100,000 chunks each) cost the test 16 of its 18 s of CPU.
        + ["--case", "request", "--requests", "50", "--rounds", "1"],
        capture_output=True,
        text=True,
        cwd=TREE,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    other = next(line for line in done.stdout.splitlines() if line.startswith(f"{tmp_path}: /"))
    for name in ("wire", "headers", "stalls", "refusals"):
        assert f"{tmp_path}/app/cli/{name}.py" in other, other
    assert str(TREE / "app") not in other
    assert f"{tmp_path}: median " in done.stdout
