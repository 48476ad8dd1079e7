"""The test suite's fixed costs per process, alternated against another checkout.

`uv run python -m bench.suite_overhead --against <old checkout> [--rounds 3]`, under the CPU lock:

- collection: `pytest --collect-only` in each checkout (its own pyproject's plugins and options,
  this venv's packages), CPU of the pytest process: what each xdist worker pays before its first
  test;
- imports: `agmem serve`'s imports (app.cli.serving, app.main) from a copy of this app/ without
  and with its bytecode, as each `agmem` process the tests start pays them (PYTHONDONTWRITEBYTECODE
  set, as on this machine: nothing is written back);
- mypy: `mypy --strict app` on a cold cache, one process against --mypy-workers workers,
  wall and CPU.

Rounds alternate the two sides; each line is one run.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def timed(command: Sequence[str], cwd: Path, **env: str) -> tuple[float, float]:
    """(wall, CPU of the command and its children) of one run, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env},
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def report(what: str, side: str, wall: float, cpu: float) -> None:
    print(f"{what:10} {side:12} wall {wall:6.2f} s  cpu {cpu:6.2f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the old checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mypy-workers", type=int, default=2)
    options = parser.parse_args()
    collect = [str(BIN / "pytest"), "--collect-only", "-q", "-p", "no:cacheprovider"]
    imports = [sys.executable, "-c", "import app.cli.serving, app.main"]
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as folder:
        copy = Path(folder) / "tree"
        shutil.copytree(HERE / "app", copy / "app", ignore=shutil.ignore_patterns("__pycache__"))
        for round_ in range(options.rounds):
            for side, checkout in (("against", options.against), ("this", HERE)):
                report("collect", side, *timed(collect, checkout))
            for side in ("no bytecode", "bytecode"):
                for cached in (copy / "app").rglob("__pycache__"):
                    shutil.rmtree(cached)
                if side == "bytecode":
                    compileall.compile_dir(copy / "app", quiet=1)
                report("imports", side, *timed(imports, copy))
            for workers in (0, options.mypy_workers):
                cache = Path(folder) / f"mypy-{round_}-{workers}"
                command = [str(BIN / "mypy"), "--strict", "--cache-dir", str(cache)]
                command += ["-n", str(workers), "app"]
                report("mypy", f"-n {workers}", *timed(command, HERE))


if __name__ == "__main__":
    main()
