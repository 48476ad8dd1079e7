"""The client's lines for `agmem mcp`, read by a daemon thread so that a signal ends it at once.

The SDK's stdio transport reads stdin with `readline` in an AnyIO worker thread, which is not a
daemon thread: after SIGTERM (how a client stops the server it launched) the process waited in
the interpreter's exit for that read, that is until the client closed the pipe, and only then
stopped the embedded PostgreSQL. A daemon thread's pending read does not hold the exit up.

SIGTERM ends the input as its end does (`sigterm_ends_input`): the SDK then ends the server its
own way, from the event loop.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from types import FrameType

from app.entry import end_at_once, end_by_deadline, signalled
from app.mcp.wire import surrogates_cleaned


@asynccontextmanager
async def client_lines() -> AsyncIterator[AsyncIterator[str]]:
    """The lines on stdin, as the SDK's transport reads them (UTF-8, undecodable bytes replaced),
    with their lone surrogate escapes cleaned as over HTTP; SIGTERM ends them.

    While they are read, fd 0 is the null device, as the SDK arranges it, so that nothing else
    in the process or its children reads the protocol; it is given back at the end."""
    wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    loop = asyncio.get_running_loop()
    handed: asyncio.Queue[str | None] = asyncio.Queue()
    # One line at a time: a client writing faster than the server answers waits, as before.
    taken = threading.Semaphore(1)

    def hand_over(line: str | None) -> bool:
        try:
            loop.call_soon_threadsafe(handed.put_nowait, line)
        except RuntimeError:  # the server has ended, its loop with it
            return False
        return True

    def read() -> None:
        # Never closed: this thread may still be blocked on it when the process exits.
        with open(wire, "rb", closefd=False) as stream:
            for line in stream:
                # A lone surrogate's escape made the SDK drop the line: the call had no answer.
                text = surrogates_cleaned(line).decode("utf-8", errors="replace")
                taken.acquire()
                if not hand_over(text):
                    return
        hand_over(None)

    async def lines() -> AsyncIterator[str]:
        while (line := await handed.get()) is not None:
            taken.release()
            yield line

    threading.Thread(target=read, name="mcp-stdin", daemon=True).start()
    try:
        with sigterm_ends_input(lambda: handed.put_nowait(None)):
            yield lines()
    finally:
        os.dup2(wire, 0)


@contextmanager
def sigterm_ends_input(end_input: Callable[[], None]) -> Iterator[None]:
    """While serving, SIGTERM calls `end_input` from the event loop; a second ends at once.

    SIGTERM raised `Terminated` wherever the main thread was. Where that was a finalizer (the
    connection pool's reset of a connection a cancelled call left, run by the garbage
    collector), Python only printed it ("Exception during reset or similar") and the server
    went on answering its client's calls, at full CPU under a flood of them, until the exit
    deadline (2 of 15 SIGTERMs during a flood); raised in a tool's task, it left the SDK's task
    groups to unwind it, exit 1 with their ExceptionGroup's traceback."""
    loop = asyncio.get_running_loop()
    stopping = False

    def on_sigterm(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            end_at_once(signum)
        stopping = True
        signalled()  # one more while the embedded server stops at exit stops it at once
        end_by_deadline(signum)
        loop.call_soon_threadsafe(end_input)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        if not stopping:  # else a second SIGTERM still ends at once
            signal.signal(signal.SIGTERM, previous)
