"""Refusals of `agmem serve`'s HTTP/1.1 protocol (app/cli/wire.py, app/cli/stalls.py,
app/cli/headers.py): a refusal raised from a parser callback, its answer's body in the shared
error shape, and their log, a flood of which is a count.
"""

from __future__ import annotations

import asyncio
import json
import logging

import httptools

from app.config import Settings
from app.errors import AppError

REFUSAL_LOG_SECONDS: float = Settings.model_fields["refusal_log_seconds"].default

Header = tuple[bytes, bytes]


def error_body(error: AppError) -> bytes:
    """`error` in the shared shape, named by its class as the app's handlers name it."""
    return json.dumps({"error": error.error, "detail": error.detail}).encode()


class Refused(httptools.HttpParserError):
    """A request refused from a parser callback, which stops the parser: its answer, and the
    cause the log names."""

    def __init__(
        self,
        status: bytes,
        body: bytes,
        headers: list[Header],
        cause: str,
        *,
        dispatched: bool = False,
    ) -> None:
        super().__init__(cause)
        self.status = status
        self.body = body
        self.headers = headers
        self.cause = cause
        self.dispatched = dispatched  # for its trailers: the app was given it with its headers


class RefusalLog:
    """One log line per cause at most every `window` seconds (AGMEM_REFUSAL_LOG_SECONDS, shared
    by the connections): a flood of refusals is a count. The count is logged when its window
    ends, by one timer per cause (not per connection), or when the server stops (`flush`); the
    window it closes begins the next, so a steady flood is one line per window."""

    def __init__(self, window: float = REFUSAL_LOG_SECONDS) -> None:
        self.window = window
        self.window_began: dict[str, float] = {}
        self.quiet: dict[str, int] = {}
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.logger = logging.getLogger("uvicorn.error")

    def note(self, logger: logging.Logger, loop: asyncio.AbstractEventLoop, cause: str) -> None:
        now = loop.time()
        began = self.window_began.get(cause)
        if began is None or now - began >= self.window:
            self.window_began[cause] = now
            logger.warning("%s", cause)
            return
        self.quiet[cause] = self.quiet.get(cause, 0) + 1
        if cause not in self.timers:
            self.logger = logger
            ends = began + self.window - now
            self.timers[cause] = loop.call_later(ends, self.window_ended, cause, loop)

    def window_ended(self, cause: str, loop: asyncio.AbstractEventLoop) -> None:
        self.timers.pop(cause, None)
        self.window_began[cause] = loop.time()
        self.log_count(cause)

    def log_count(self, cause: str) -> None:
        quiet = self.quiet.pop(cause, 0)
        if quiet:
            self.logger.warning("%s: %d more since the line before", cause, quiet)

    def flush(self) -> None:
        """The counts not logged yet, as the server stops."""
        for cause, timer in list(self.timers.items()):
            timer.cancel()
            del self.timers[cause]
            self.log_count(cause)
