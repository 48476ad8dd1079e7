"""The temporary roots of test runs: one per run, kept after a failure for a look, and only the
newest few of those kept.

A root is ~1.4 GB after a full run (the embedded server's data folders and the copies of its
migrated homes). pytest keeps only its own last three roots, but the suite makes its own (see
`pytest_configure`), so every failed or interrupted run's root stayed: 287 of them, 25 GB, were
found in /tmp after a day of runs. A run holds an advisory lock on its root for its whole life,
so a run in progress beside this one (another checkout's suite) is never pruned.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "agmem-pytest-"
KEPT_FINISHED_RUNS = 3
_IN_USE = ".in-use"


def make_run_root(parent: str | None = None) -> tuple[str, int]:
    """A new root and the descriptor holding its lock: keep the descriptor open until the run ends
    (the lock goes with the process, however it ends)."""
    root = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    descriptor = os.open(os.path.join(root, _IN_USE), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    return root, descriptor


def prune_finished_roots(parent: Path, keep: int = KEPT_FINISHED_RUNS) -> list[Path]:
    """Remove all but the `keep` newest roots of runs that have ended; return the removed ones.

    A root without the lock file is left alone: an older build's run, which may be in progress,
    or a root made a moment ago whose lock file is not there yet."""
    finished: list[tuple[float, Path, int]] = []
    try:
        for root in parent.glob(PREFIX + "*"):
            descriptor = _lock_if_finished(root / _IN_USE)
            if descriptor is not None:
                finished.append((os.fstat(descriptor).st_mtime, root, descriptor))
        finished.sort(key=lambda entry: entry[0], reverse=True)
        removed = [root for _, root, _ in finished[keep:]]
        for root in removed:
            shutil.rmtree(root, ignore_errors=True)
        return removed
    finally:
        for _, _, descriptor in finished:
            os.close(descriptor)


def _lock_if_finished(lock_file: Path) -> int | None:
    try:
        descriptor = os.open(lock_file, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)  # a run in progress holds it
        return None
    return descriptor
