"""Capture work off the response path, in arrival order per conversation.

A call's capture is submitted when its request arrives, so the results a request carries are
always recorded after the calls of the answer before it, even though each job runs in the
background and waits for its own answer to finish streaming.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

Job = Callable[[], Awaitable[None]]


class OrderedJobs:
    """Background jobs that run one after another per key, never failing their submitter."""

    def __init__(self) -> None:
        self._tails: dict[str, asyncio.Task[None]] = {}
        self._running: set[asyncio.Task[None]] = set()

    def submit(self, key: str, job: Job) -> None:
        """Run `job` after every job submitted earlier under `key`."""
        previous = self._tails.get(key)
        task = asyncio.create_task(self._run(key, previous, job))
        self._tails[key] = task
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, key: str, previous: asyncio.Task[None] | None, job: Job) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            await job()
        except Exception as error:
            # Capture is best effort: the caller already has (or will get) its answer.
            log.warning(
                "proxy.capture_failed", error_type=type(error).__name__, error=str(error)[:300]
            )
        finally:
            if self._tails.get(key) is asyncio.current_task():
                del self._tails[key]

    async def drain(self, timeout_s: float) -> None:
        """Wait for submitted jobs (at shutdown), cancelling what is left after `timeout_s`."""
        if not self._running:
            return
        _, pending = await asyncio.wait(list(self._running), timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("proxy.capture_abandoned", jobs=len(pending))
            await asyncio.wait(pending)

    @property
    def pending(self) -> int:
        return len(self._running)
