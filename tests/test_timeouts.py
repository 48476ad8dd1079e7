"""tests/timeouts.py: a test past its timeout says where its asyncio tasks wait."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# A task that swallows its cancellation (as a writer did under 3.11's `wait_for`): once the
# timeout's failure leaves the loop, `asyncio.run` waits for it to end, for ever.
STUBBORN = """
import asyncio


async def stubborn_writer() -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass


async def waits_for_the_rows() -> None:
    await asyncio.sleep(3600)


def test_stuck() -> None:
    async def main() -> None:
        asyncio.create_task(stubborn_writer(), name="the-writer")
        await waits_for_the_rows()

    asyncio.run(main())


def test_after() -> None:
    pass
"""

# The same wait, with tasks that end when cancelled: the test fails and the run goes on.
POLITE = STUBBORN.replace(
    "        except asyncio.CancelledError:\n            pass\n",
    "        finally:\n            pass\n",
)


def run_pytest(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(source)
    (tmp_path / "conftest.py").write_text(
        "import tests.timeouts\ntests.timeouts.GRACE_SECONDS = 1.0\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.timeouts", "-p", "no:cacheprovider"]
        + ["--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), "--timeout", "1"]
        + [*args, str(tmp_path / "test_inner.py")],
        cwd=REPO,  # `tests` importable, as in the suite
        capture_output=True,
        text=True,
        timeout=90,  # a hang guard: the inner run ends seconds after it starts
    )


def test_a_timed_out_test_that_ends_fails_with_its_tasks_await_chains(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, POLITE, "-p", "no:xdist")
    said = done.stdout + done.stderr

    assert "1 failed, 1 passed" in said, said
    assert "Timeout (>1.0s from pytest-timeout); asyncio tasks at the time:" in said
    # The main task's chain, down to the coroutine that waits.
    assert ", in main\n" in said
    assert ", in waits_for_the_rows\n" in said
    assert "still running" not in said


# A task that swallows the first cancellation and ends 3 s later: the test's failure is raised,
# it is still running GRACE_SECONDS (1 s here) after, and then it ends. And a test under a
# debugger (pytest-timeout's SUPPRESS_TIMEOUT, set as it enters pdb) that outlives its timeout:
# no failure and nothing said (rev-flaky25: the first version ended the process there).
LATE_AND_DEBUGGED = """
import asyncio
import time

import pytest_timeout


async def late_writer() -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(3)


def test_late() -> None:
    async def main() -> None:
        asyncio.create_task(late_writer(), name="the-late-writer")
        await asyncio.sleep(3600)

    asyncio.run(main())


def test_debugged() -> None:
    pytest_timeout.SUPPRESS_TIMEOUT = True
    try:
        time.sleep(2)
    finally:
        pytest_timeout.SUPPRESS_TIMEOUT = False


def test_after() -> None:
    pass
"""


def test_a_test_still_running_after_its_timeout_is_described_once_and_a_debugged_one_never(
    tmp_path: Path,
) -> None:
    done = run_pytest(tmp_path, LATE_AND_DEBUGGED, "-p", "no:xdist")
    said = done.stdout + done.stderr

    assert "1 failed, 2 passed" in said, said
    assert said.count("still running 1 s after its 1 s timeout") == 1, said
    assert "test_inner.py::test_late: still running" in said
    assert "task 'the-late-writer'" in said
