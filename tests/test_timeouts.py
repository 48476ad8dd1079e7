"""tests/timeouts.py: a test past its timeout ends, and says where its asyncio tasks wait."""

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
        "import tests.timeouts\ntests.timeouts.GRACE_SECONDS = 2.0\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.timeouts", "-p", "no:cacheprovider"]
        + ["--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), "--timeout", "2"]
        + [*args, str(tmp_path / "test_inner.py")],
        cwd=REPO,  # `tests` importable, as in the suite
        capture_output=True,
        text=True,
        timeout=90,  # a hang guard: the inner run ends in ~2 + 2 s once started
    )


def test_a_test_stuck_past_its_timeout_in_asyncio_s_teardown_ends_and_names_the_task(
    tmp_path: Path,
) -> None:
    # pytest-timeout's failure left the loop and `asyncio.run` then waited for the task for
    # ever, printing nothing: the run never ended (the lead's CI of round 25).
    done = run_pytest(tmp_path, STUBBORN)
    said = done.stdout + done.stderr

    assert done.returncode == 1, said
    assert "test_inner.py::test_stuck: still running 2 s after its 2 s timeout" in said
    assert "task 'the-writer' (cancelling)" in said
    assert ", in stubborn_writer\n" in said
    assert "_cancel_all_tasks" in said  # the main thread's stack: where the run was held


def test_under_xdist_a_stuck_test_crashes_its_worker_and_the_run_goes_on(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, STUBBORN, "-p", "xdist", "-n", "1")
    said = done.stdout + done.stderr

    assert done.returncode == 1, said
    assert "task 'the-writer' (cancelling)" in said
    assert "1 failed, 1 passed" in said, said


def test_a_timed_out_test_that_ends_fails_with_its_tasks_await_chains(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, POLITE, "-p", "no:xdist")
    said = done.stdout + done.stderr

    assert "1 failed, 1 passed" in said, said
    assert "Timeout (>2.0s from pytest-timeout); asyncio tasks at the time:" in said
    # The main task's chain, down to the coroutine that waits.
    assert ", in main\n" in said
    assert ", in waits_for_the_rows\n" in said
    assert "still running" not in said
