"""Per-test CPU accounting, on when AGMEM_TEST_CPU_LOG names a folder.

Each test's line (JSON, one file per xdist worker) holds the pytest process's CPU over the test's
setup, call and teardown, the CPU of the child processes reaped meanwhile (a fixture's server is
counted in the teardown that stops it) and how many processes the test started. Servers the
tests never wait for (the embedded PostgreSQL) are not counted. To see where the suite's CPU goes:
`AGMEM_TEST_CPU_LOG=/tmp/x uv run pytest -n 2 --dist loadgroup`, then `python -m
tests.cpu_accounting /tmp/x`. Each run starts the folder afresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_STARTED = [0]


def _count_starts() -> None:
    original = subprocess.Popen.__init__

    def counting(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        _STARTED[0] += 1
        original(self, *args, **kwargs)

    subprocess.Popen.__init__ = counting  # type: ignore[method-assign]


class CpuAccounting:
    def __init__(self, folder: Path, worker: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._out = (folder / f"{worker}.jsonl").open("w")
        self._worker = worker
        _count_starts()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        before = os.times()
        started = _STARTED[0]
        wall = time.perf_counter()
        yield
        after = os.times()
        line = {
            "id": item.nodeid,
            "worker": self._worker,
            "self": after.user + after.system - before.user - before.system,
            "children": after.children_user
            + after.children_system
            - before.children_user
            - before.children_system,
            "processes": _STARTED[0] - started,
            "wall": time.perf_counter() - wall,
            "end": time.time(),
        }
        self._out.write(json.dumps(line) + "\n")
        self._out.flush()


def configure(config: pytest.Config) -> None:
    folder = os.environ.get("AGMEM_TEST_CPU_LOG")
    if not folder:
        return
    if not hasattr(config, "workerinput"):
        # The run's first process, before any worker starts: the last run's lines (a worker this
        # run may not have among them) would add to this run's summary.
        for stale in Path(folder).glob("*.jsonl"):
            stale.unlink()
        if config.getoption("numprocesses", None):
            return  # the xdist controller runs no test
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    config.pluginmanager.register(CpuAccounting(Path(folder), worker), "agmem-cpu-accounting")


def summary(folder: Path, top: int = 40) -> None:
    rows = [json.loads(line) for path in folder.glob("*.jsonl") for line in path.open()]
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    workers: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    for row in rows:
        for key, table in ((row["id"].split("::")[0], files), (row["worker"], workers)):
            sums = table[key]
            sums[0] += row["self"]
            sums[1] += row["children"]
            sums[2] += row["processes"]
            sums[3] += row["wall"]
            sums[4] += 1
    total = [sum(r[k] for r in rows) for k in ("self", "children", "processes", "wall")]
    print(
        f"{len(rows)} tests: self {total[0]:.1f} s, children {total[1]:.1f} s, "
        f"{total[2]:.0f} processes, wall {total[3]:.1f} s"
    )
    for name, sums in sorted(workers.items()):
        print(
            f"worker {name}: {sums[4]:.0f} tests, self {sums[0]:.1f} s, "
            f"children {sums[1]:.1f} s, wall {sums[3]:.1f} s"
        )
    print(f"{'cpu':>7} {'self':>7} {'child':>7} {'procs':>5} {'wall':>7} {'tests':>5}  file")
    for name, sums in sorted(files.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        print(
            f"{sums[0] + sums[1]:7.1f} {sums[0]:7.1f} {sums[1]:7.1f} {sums[2]:5.0f} "
            f"{sums[3]:7.1f} {sums[4]:5.0f}  {name}"
        )
    print("tests:")
    for row in sorted(rows, key=lambda r: -(r["self"] + r["children"]))[:top]:
        print(
            f"{row['self'] + row['children']:7.2f} {row['self']:7.2f} {row['children']:7.2f} "
            f"{row['processes']:5d} {row['wall']:7.2f}  {row['id']}"
        )


if __name__ == "__main__":
    summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40)
