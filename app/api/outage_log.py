"""The log of requests a database could not serve: a flood of them is a count.

Every request that met an unreachable database logged its own `database.unreachable` line: a
5 s restart of the embedded server under 20 clients was 56 identical lines, and an outage of a
minute under a busy team thousands, burying the supervisor's `embedded_postgres.down` and
`restarted` lines an operator looks for. Now one line per cause starts a window of
AGMEM_REFUSAL_LOG_SECONDS (as for the wire's refusals, app/cli/refusals.py); the requests that
fail within it are counted, and the count is logged when the window ends (`repeated=N`, with
the latest error), which begins the next window, or when the app or `agmem mcp` stops: a
steady outage is one line per window, a short one a line and its count.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from app.config import Settings

log = structlog.get_logger("app.api.errors")

# Until an app or `agmem mcp` sets its AGMEM_REFUSAL_LOG_SECONDS (`OutageLog.window`).
DATABASE_LOG_SECONDS: float = Settings.model_fields["refusal_log_seconds"].default


@dataclass
class _Window:
    began: float
    quiet: int = 0
    fields: dict[str, Any] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None
    loop: asyncio.AbstractEventLoop | None = None


class OutageLog:
    """One warning per cause (`event` and `key`) at most every `window` seconds."""

    def __init__(self, window: float = DATABASE_LOG_SECONDS) -> None:
        self.window = window
        self.windows: dict[tuple[str, str], _Window] = {}

    def warn(self, event: str, key: str, **fields: Any) -> None:
        now = time.monotonic()
        window = self.windows.get((event, key))
        if window is None or now - window.began >= self.window:
            # Counted where no loop could time the window (no timer ran): said now.
            repeated = {"repeated": window.quiet} if window is not None and window.quiet else {}
            if window is not None and window.timer is not None:
                window.timer.cancel()
            self.windows[(event, key)] = _Window(began=now)
            log.warning(event, **fields, **repeated)
            return
        window.quiet += 1
        window.fields = fields
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if window.timer is None or window.loop is not loop:
            ends = window.began + self.window - now
            window.loop = loop
            window.timer = loop.call_later(ends, self._window_ended, event, key)

    def flush(self) -> None:
        """Log every window's count now (the app stops): a stop within a window lost it."""
        for (event, key), window in list(self.windows.items()):
            if window.timer is not None:
                window.timer.cancel()
            del self.windows[(event, key)]
            if window.quiet:
                log.warning(event, **window.fields, repeated=window.quiet)

    def _window_ended(self, event: str, key: str) -> None:
        window = self.windows.get((event, key))
        if window is None or not window.quiet:
            return
        self.windows[(event, key)] = _Window(began=time.monotonic())
        log.warning(event, **window.fields, repeated=window.quiet)


OUTAGE_LOG = OutageLog()
