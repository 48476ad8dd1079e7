"""The suite's temporary roots: the newest few finished ones kept, none in use removed."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from tests.run_roots import PREFIX, make_run_root, prune_finished_roots


def _finished_root(parent: Path, started: float) -> Path:
    root, descriptor = make_run_root(str(parent))
    os.close(descriptor)  # the run ended
    os.utime(Path(root) / ".in-use", (started, started))
    return Path(root)


def test_only_the_newest_finished_roots_are_kept(tmp_path: Path) -> None:
    finished = [
        _finished_root(tmp_path, started) for started in (1_000, 5_000, 2_000, 4_000, 3_000)
    ]
    removed = prune_finished_roots(tmp_path, keep=3)
    assert sorted(removed) == sorted([finished[0], finished[2]])  # started at 1,000 and 2,000
    assert sorted(tmp_path.iterdir()) == sorted([finished[1], finished[3], finished[4]])


def test_a_root_in_use_by_another_run_is_never_removed(tmp_path: Path) -> None:
    running = subprocess.Popen(
        [sys.executable, "-c", _HOLD_A_ROOT, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        assert running.stdout is not None
        in_use = Path(running.stdout.readline().strip())
        os.utime(in_use / ".in-use", (1, 1))  # the oldest of all
        kept = [_finished_root(tmp_path, started) for started in (2_000, 3_000)]
        assert sorted(prune_finished_roots(tmp_path, keep=0)) == sorted(kept)
        assert in_use.exists()
    finally:
        running.kill()
        running.wait()
    assert prune_finished_roots(tmp_path, keep=0) == [in_use]  # its run ended


def test_a_root_without_the_lock_file_is_left_alone(tmp_path: Path) -> None:
    older_build = tmp_path / f"{PREFIX}older"
    older_build.mkdir()
    os.utime(older_build, (1, 1))
    assert prune_finished_roots(tmp_path, keep=0) == []
    assert older_build.exists()


def test_a_new_root_is_locked_while_its_run_lasts(tmp_path: Path) -> None:
    root, descriptor = make_run_root(str(tmp_path))
    other = os.open(Path(root) / ".in-use", os.O_RDWR)
    try:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            raise AssertionError("a new root's lock was free while its run lasted")
    finally:
        os.close(other)
        os.close(descriptor)


_HOLD_A_ROOT = """
import sys, time
from tests.run_roots import make_run_root
root, _ = make_run_root(sys.argv[1])
print(root, flush=True)
time.sleep(60)
"""
