"""The client's lines for `agmem mcp`, read by a daemon thread so that a signal ends it at once.

The SDK's stdio transport reads stdin with `readline` in an AnyIO worker thread, which is not a
daemon thread: after SIGTERM (how a client stops the server it launched) the process waited in
the interpreter's exit for that read, that is until the client closed the pipe, and only then
stopped the embedded PostgreSQL. A daemon thread's pending read does not hold the exit up.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from collections.abc import AsyncIterator
from concurrent.futures import CancelledError
from contextlib import asynccontextmanager

from app.mcp.wire import surrogates_cleaned


@asynccontextmanager
async def client_lines() -> AsyncIterator[AsyncIterator[str]]:
    """The lines on stdin, as the SDK's transport reads them (UTF-8, undecodable bytes replaced),
    with their lone surrogate escapes cleaned as over HTTP.

    While they are read, fd 0 is the null device, as the SDK arranges it, so that nothing else
    in the process or its children reads the protocol; it is given back at the end."""
    wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    loop = asyncio.get_running_loop()
    # One line at a time: a client writing faster than the server answers waits, as before.
    handed: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1)

    def hand_over(line: str | None) -> bool:
        try:
            asyncio.run_coroutine_threadsafe(handed.put(line), loop).result()
        except (RuntimeError, CancelledError):  # the server has ended, its loop with it
            return False
        return True

    def read() -> None:
        # Never closed: this thread may still be blocked on it when the process exits.
        with open(wire, "rb", closefd=False) as stream:
            for line in stream:
                # A lone surrogate's escape made the SDK drop the line: the call had no answer.
                text = surrogates_cleaned(line).decode("utf-8", errors="replace")
                if not hand_over(text):
                    return
        hand_over(None)

    async def lines() -> AsyncIterator[str]:
        while (line := await handed.get()) is not None:
            yield line

    threading.Thread(target=read, name="mcp-stdin", daemon=True).start()
    try:
        yield lines()
    finally:
        os.dup2(wire, 0)
