"""pytest-timeout's per-test timeout, kept a hang guard for tests that run an event loop.

Its SIGALRM raises the failure in the main thread, wherever it is: in `asyncio.run`'s loop, the
exception leaves the loop and `asyncio.run` then cancels the tasks left and waits for them. A task
that does not end on cancellation (a cancellation swallowed, as 3.11's `wait_for` does in a
race) held the run there for ever, with nothing printed: its own stack dump leaves out the main
thread, and a run with no other thread prints no dump at all (the lead's CI of round 25 hung so).

So, on a timeout: every unfinished asyncio task is written with its await chain (where each
coroutine waits, down to the future at the bottom), to stderr and into the failure; and if the
test has still not ended GRACE_SECONDS later, every thread's stack and the tasks again. The
process is not ended then: under `--dist loadgroup` (the suite's) pytest-xdist 3.8's controller
waited for ever on a worker that exited mid-test (rev-flaky25), so a stuck run stays stuck, as
it would without this module, but says where.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterable
from types import FrameType
from typing import Any

import pytest
import pytest_timeout  # type: ignore[import-untyped]

GRACE_SECONDS = 30.0


def _frame_of(awaitable: object) -> FrameType | None:
    for name in ("cr_frame", "gi_frame", "ag_frame"):
        frame = getattr(awaitable, name, None)
        if frame is not None:
            return frame  # type: ignore[no-any-return]
    return None


def _awaited_by(awaitable: object) -> object:
    for name in ("cr_await", "gi_yieldfrom", "ag_await"):
        inner = getattr(awaitable, name, None)
        if inner is not None:
            return inner
    return None


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """Where `task` waits: each coroutine of its chain (outermost first), then what the
    innermost awaits (a future, another task), as lines."""
    lines = []
    awaitable: object = task.get_coro()
    for _ in range(200):  # a chain that loops back on itself is not followed for ever
        if awaitable is None:
            break
        if isinstance(awaitable, asyncio.Future):
            lines.append(f"    awaiting {awaitable!r:.500}")
            break
        frame = _frame_of(awaitable)
        if frame is None:
            lines.append(f"    awaiting {awaitable!r:.500}")
        else:
            code = frame.f_code
            lines.append(f'    File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}')
        awaitable = _awaited_by(awaitable)
    # What `await future` leaves at the bottom (a C future's iterator) does not name its future.
    waiter = getattr(task, "_fut_waiter", None)
    if waiter is not None:
        lines.append(f"    the task waits on {waiter!r:.500}")
    return lines


def _all_tasks() -> Iterable[asyncio.Task[Any]]:
    # Every loop's, whichever thread runs it: `asyncio.all_tasks()` sees only this thread's.
    tasks: set[asyncio.Task[Any]] = set()
    for name in ("_all_tasks", "_scheduled_tasks", "_eager_tasks"):
        with_them = getattr(asyncio.tasks, name, None)
        for _ in range(5):  # another thread's loop may add a task as this copies the set
            try:
                tasks.update(list(with_them or ()))
                break
            except RuntimeError:
                continue
    return sorted((task for task in tasks if not task.done()), key=id)


def describe_tasks() -> str:
    """The unfinished asyncio tasks of every loop, with their await chains ("" if none)."""
    lines = []
    for task in _all_tasks():
        state = " (cancelling)" if task.cancelling() else ""
        lines.append(f"task {task.get_name()!r}{state} of loop {id(task.get_loop()):#x}:")
        lines.extend(await_chain(task))
    return "\n".join(lines)


def _write(item: pytest.Item, text: str) -> None:
    """`text` on the console, with what the test printed: its capture stopped first, as it
    holds the descriptors (a pytest-xdist worker's stderr is its controller's)."""
    capture = item.config.pluginmanager.getplugin("capturemanager")
    printed = ("", "")
    if capture is not None:
        capture.suspend_global_capture(item)
        printed = capture.read_global_capture()
    for title, output in zip(("stdout", "stderr"), printed, strict=True):
        if output:
            text = f"--- the test's {title} ---\n{output}\n" + text
    data = text.encode(errors="replace")
    while data:
        data = data[os.write(2, data) :]


def _thread_stacks() -> str:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    stacks = []
    for ident, frame in sys._current_frames().items():
        stacks.append(f"thread {names.get(ident, '?')!r} ({ident}):\n")
        stacks.append("".join(traceback.format_stack(frame)))
    return "".join(stacks)


def _say_what_still_runs(item: pytest.Item, timeout: float) -> None:
    """The test did not end after its timeout's failure: what everything waits on."""
    tasks = describe_tasks()
    _write(
        item,
        f"\n+++ {item.nodeid}: still running {GRACE_SECONDS:g} s after its {timeout:g} s "
        "timeout; every thread's stack and asyncio task +++\n"
        f"{_thread_stacks()}{tasks or 'no asyncio task'}\n+++ end +++\n",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own thread method ends the process itself
    last_resort: list[threading.Timer] = []

    def on_timeout(signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        tasks = describe_tasks()
        if tasks:
            escaped = tasks.replace("%", "%%")  # the message is a %-format of the timeout
            pytest_timeout.PYTEST_FAILURE_MESSAGE = (
                f"Timeout (>%ss from pytest-timeout); asyncio tasks at the time:\n{escaped}"
            )
        try:
            # Raises the test's failure; returns without one under a debugger (pdb, an IDE).
            pytest_timeout.timeout_sigalrm(item, settings)
        except BaseException:
            teller = threading.Timer(GRACE_SECONDS, _say_what_still_runs, (item, settings.timeout))
            teller.name = f"still running: {item.nodeid}"
            teller.daemon = True
            teller.start()
            last_resort.append(teller)
            raise
        finally:
            pytest_timeout.PYTEST_FAILURE_MESSAGE = _MESSAGE

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        for ender in last_resort:
            ender.cancel()

    item.cancel_timeout = cancel  # type: ignore[attr-defined]
    signal.signal(signal.SIGALRM, on_timeout)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


_MESSAGE = pytest_timeout.PYTEST_FAILURE_MESSAGE
