"""The database's last refusal for want of room or a working disk, kept for /health.

A full disk left /health saying "ok" while every write was answered 503 "disk is full": its own
queries only read, which a full disk still serves. Probing with a write of its own at every poll
would cost WAL and could still succeed on a page with room left; the refusals requests met are
free and are the truth a caller meets."""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.errors import sqlstate

# SQLSTATEs that say the database cannot store (53100 disk_full) or cannot use its files (classes
# 58, I/O, and XX, internal: "could not extend file"), as app/api/errors.py words them.
STORAGE_STATES = ("53100",)
STORAGE_CLASSES = ("58", "XX")

# How long /health reports a refusal after the last one: long enough for a probe polling every
# 10-30 s to see it, short enough that space freed shows as "ok" within a minute.
REPORT_SECONDS = 60.0


def is_storage_failure(code: str) -> bool:
    return code in STORAGE_STATES or code[:2] in STORAGE_CLASSES


@dataclass(slots=True)
class StorageRefusals:
    detail: str | None = None
    at: float = 0.0

    def note(self, detail: str, now: float) -> None:
        self.detail, self.at = detail, now

    def note_if_storage(self, error: BaseException, detail: str) -> None:
        """Keep `detail` (the caller's answer) when `error` says the database cannot store: the
        HTTP API's handlers and the MCP tools (app/mcp/server.py) both call this."""
        if is_storage_failure(sqlstate(error)):
            self.note(detail, time.monotonic())

    def recent(self, now: float) -> tuple[str, float] | None:
        """The last refusal's detail and its age in seconds, if it is recent enough to report."""
        if self.detail is None or now - self.at > REPORT_SECONDS:
            return None
        return self.detail, now - self.at
