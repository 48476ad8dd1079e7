"""Keep the embedded PostgreSQL a serving process started running: restart it when it dies.

pg_ctl detaches the postmaster, so nothing tells us when it dies (SIGKILL, a crash, the OOM
killer when it picks the postmaster rather than a backend); every request then got a 503 until
another `agmem` command happened to start it again. A background task of the app's lifespan
looks at the postmaster's pid once a second (a small file read and a signal-0 `kill`, never a
database round trip: no request pays for it), restarts the server through the same path as
startup, then lets the app drop the connections that died with it. Only a process that started
or joined the embedded server runs it: an external `DATABASE_URL` is never started or stopped.
Every long-running command runs one (`agmem serve`, `worker`, `mcp`, `sync --watch`): any of
them may be the last process using the server.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import structlog

from app.db.embedded import start_embedded_postgres
from app.db.postmaster import alive, postmaster_pid, started_before
from app.errors import first_line

log = structlog.get_logger(__name__)

CHECK_SECONDS = 1.0
# A server that does not come back is retried after 1, 2, 4 ... s, then every 30 s: each attempt
# runs pg_ctl (up to 10 s) under pgserver's lock, which every other `agmem` process starting a
# server on this machine waits for.
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
MAX_DOUBLINGS = 5  # 1 s doubled five times passes MAX_RETRY_SECONDS

Starter = Callable[[Path], str]
Sleeper = Callable[[asyncio.Event, float], Awaitable[None]]


def running_postmaster(pgdata: Path) -> int | None:
    """The pid of the live postmaster of `pgdata`, or None when there is none."""
    pid = postmaster_pid(pgdata)
    if pid is None:
        return None
    # pg_ctl's child is orphaned to pid 1. Where agmem is pid 1 (a container without an init),
    # a dead postmaster is our zombie: reap it, or it stays in the process table. Under another
    # pid 1 that never reaps, `alive` tells the zombie from a running postmaster.
    with suppress(ChildProcessError):
        reaped, _status = os.waitpid(pid, os.WNOHANG)
        if reaped:
            return None
    return pid if alive(pid) else None


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


@dataclass
class EmbeddedSupervisor:
    """Restarts the embedded server of `pgdata` when its postmaster is gone.

    `after_restart` runs once the server answers again: the app disposes of its pools' dead
    connections there, so the first request after the restart does not get one of them.
    """

    pgdata: Path
    url: str
    after_restart: Callable[[], Awaitable[None]]
    start: Starter = start_embedded_postgres
    sleep: Sleeper = wait_or_stop
    check_seconds: float = CHECK_SECONDS
    pid: int | None = None  # the postmaster's, as last seen alive
    # What /health reports while the server is down: attempts so far and the last failure.
    down_since: float | None = None
    attempts: int = 0
    last_error: str | None = None

    def describe(self) -> str | None:
        """A sentence for /health while the server is down, else None."""
        if self.down_since is None:
            return None
        tried = f"restart attempt {self.attempts}" if self.attempts else "restarting"
        failed = f", last failure: {self.last_error}" if self.last_error else ""
        return f"the embedded PostgreSQL stopped; {tried}{failed}"

    async def run(self, stop: asyncio.Event) -> None:
        """Check every `check_seconds` until `stop`; restart with back-off while it is down."""
        self.pid = running_postmaster(self.pgdata)
        while not stop.is_set():
            pid = running_postmaster(self.pgdata)
            if pid is not None:
                if self.down_since is None and self.pid is None:
                    self.pid = pid  # the first look found postmaster.pid being written
                elif self.down_since is not None or pid != self.pid:
                    # Another `agmem` process on this home started it first (a CLI command,
                    # the worker): our connections died all the same.
                    await self._back(pid, restarted_by="another process")
                await self.sleep(stop, self.check_seconds)
                continue
            if self.down_since is None:
                self.down_since = time.monotonic()
                log.warning("embedded_postgres.down", pgdata=str(self.pgdata))
            if await self._restart():
                continue
            # The exponent is capped: 2.0 ** 1024 overflows, ~10 hours into an outage.
            doublings = min(self.attempts - 1, MAX_DOUBLINGS)
            retry = min(FIRST_RETRY_SECONDS * 2**doublings, MAX_RETRY_SECONDS)
            log.warning(
                "embedded_postgres.restart_failed",
                pgdata=str(self.pgdata),
                attempt=self.attempts,
                error=self.last_error,
                retry_in_s=retry,
            )
            await self.sleep(stop, retry)

    async def _restart(self) -> bool:
        self.attempts += 1
        called = time.time()
        try:
            # Blocks for pg_ctl (seconds): off the event loop, which keeps answering 503s.
            url = await asyncio.to_thread(self.start, self.pgdata)
        except Exception as error:  # pgserver raises bare errors; retried after the back-off
            self.last_error = first_line(error)
            return False
        if url != self.url:  # the socket folder is derived from the data folder: never expected
            log.error("embedded_postgres.url_changed", before=self.url, after=url)
        pid = running_postmaster(self.pgdata)
        # The start joins a server another `agmem` process started meanwhile (a CLI command run
        # after the crash): it was logged as restarted by this one.
        joined = pid is not None and started_before(pid, called)
        await self._back(pid, restarted_by="another process" if joined else "this process")
        return True

    async def _back(self, pid: int | None, *, restarted_by: str) -> None:
        """The server runs again (postmaster `pid`): drop the connections to the old one."""
        try:
            await self.after_restart()
        except Exception as error:  # the server is back; the pools then heal on their own
            log.warning("embedded_postgres.reset_failed", error=first_line(error))
        # None when no look saw it down (another process restarted it between two looks): it was
        # two clock reads apart, -0.0.
        down_s = None if self.down_since is None else round(time.monotonic() - self.down_since, 1)
        log.warning(
            "embedded_postgres.restarted",
            pgdata=str(self.pgdata),
            by=restarted_by,
            attempts=self.attempts,
            down_s=down_s,
        )
        self.pid, self.down_since, self.attempts, self.last_error = pid, None, 0, None


@asynccontextmanager
async def supervised(
    pgdata: Path | None, url: str, after_restart: Callable[[], Awaitable[None]]
) -> AsyncIterator[EmbeddedSupervisor | None]:
    """Supervise the embedded server of `pgdata` while inside; None (an external server): no
    supervisor."""
    if pgdata is None:
        yield None
        return
    supervisor = EmbeddedSupervisor(pgdata, url, after_restart)
    stop = asyncio.Event()
    task = asyncio.create_task(supervisor.run(stop), name="agmem-embedded-supervisor")
    try:
        yield supervisor
    finally:
        stop.set()
        await task
