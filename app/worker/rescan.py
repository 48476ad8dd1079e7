"""The redaction pass after an upgrade of the privacy rules, run by the worker in the background.

`redaction_state` (one row) holds the rules' version every stored row was last redacted under.
Each worker asks at start and at every upkeep interval with one UPDATE that claims the row only
when its version is not today's and nobody else holds a live claim: when nothing changed that
statement matches no row and writes nothing. The claimant runs `app.redaction.redact_stored`
(batches of 500 rows, each its own short transaction, so captures and writes wait for one batch
at most), renewing its lease as the lanes renew theirs, and records today's version at the end.
A pass cut short (a stop, an outage) gives the claim back and the next poll starts it again:
the pass changes nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.engine import transaction
from app.privacy import RULES_VERSION
from app.redaction import BATCH_ROWS, RedactReport, redact_stored

log = structlog.get_logger(__name__)

_CLAIM = text(
    "UPDATE redaction_state SET claimed_by = :worker, "
    "claimed_until = now() + make_interval(secs => :lease) "
    "WHERE id = 1 AND rules IS DISTINCT FROM :rules "
    "AND (claimed_until IS NULL OR claimed_until < now() OR claimed_by = :worker) "
    "RETURNING rules"
)
_RENEW = text(
    "UPDATE redaction_state SET claimed_until = now() + make_interval(secs => :lease) "
    "WHERE id = 1 AND claimed_by = :worker"
)
_RELEASE = text(
    "UPDATE redaction_state SET claimed_by = NULL, claimed_until = NULL "
    "WHERE id = 1 AND claimed_by = :worker"
)
_DONE = text(
    "UPDATE redaction_state SET rules = :rules, redacted_at = now(), claimed_by = NULL, "
    "claimed_until = NULL WHERE id = 1"
)
STATE_SQL = text(
    "SELECT rules, redacted_at, claimed_by, claimed_until > now() AS running "
    "FROM redaction_state WHERE id = 1"
)


@dataclass(frozen=True)
class RescanState:
    """What `agmem status` says about the stored rows' redaction."""

    rules: str | None
    redacted_at: datetime | None
    running_on: str | None

    @property
    def pending(self) -> bool:
        return self.rules != RULES_VERSION

    def line(self) -> str:
        if not self.pending:
            return (
                f"up to date (rules {RULES_VERSION}, since {self.redacted_at:%Y-%m-%d %H:%M} UTC)"
            )
        under = self.rules or "unknown rules (before 0005)"
        where = f"running on {self.running_on}" if self.running_on else "pending"
        return (
            f"rescan {where}: stored rows last redacted under {under}, rules now "
            f"{RULES_VERSION} (the worker runs it; or `agmem redact`)"
        )


def rescan_state(row: Any) -> RescanState | None:
    """STATE_SQL's row as a state; None without one (a database emptied by hand)."""
    if row is None:
        return None
    return RescanState(row.rules, row.redacted_at, row.claimed_by if row.running else None)


_ELSEWHERE = text(
    "SELECT 1 FROM redaction_state WHERE id = 1 AND rules IS DISTINCT FROM :rules "
    "AND claimed_until > now() AND claimed_by <> :worker"
)


async def running_elsewhere(sessionmaker: async_sessionmaker[AsyncSession], worker: str) -> bool:
    """Whether another worker holds a live claim on a pass that today's rules still need."""
    async with transaction(sessionmaker) as session:
        row = (
            await session.execute(_ELSEWHERE, {"rules": RULES_VERSION, "worker": worker})
        ).first()
    return row is not None


async def mark_redacted(session: AsyncSession) -> None:
    """Record that every stored row was just redacted under today's rules (`agmem redact`)."""
    await session.execute(_DONE, {"rules": RULES_VERSION})


async def rescan_if_pending(
    sessionmaker: async_sessionmaker[AsyncSession],
    worker: str,
    *,
    lease: float,
    batch_rows: int = BATCH_ROWS,
) -> RedactReport | None:
    """Run the redaction pass if the stored rows were redacted under other rules and no other
    worker is running it; None (one statement, no write) otherwise."""
    params = {"worker": worker, "lease": lease, "rules": RULES_VERSION}
    async with transaction(sessionmaker) as session:
        claimed = (await session.execute(_CLAIM, params)).first()
    if claimed is None:
        return None
    log.info("worker.rescan_started", worker=worker, rules=RULES_VERSION, previous=claimed.rules)
    started = time.monotonic()
    heartbeat = asyncio.create_task(_renew(sessionmaker, worker, lease))
    try:
        report = await redact_stored(sessionmaker, batch_rows=batch_rows)
    except BaseException:
        with contextlib.suppress(Exception):
            async with transaction(sessionmaker) as session:
                await session.execute(_RELEASE, {"worker": worker})
        raise
    finally:
        heartbeat.cancel()
    async with transaction(sessionmaker) as session:
        await mark_redacted(session)
    log.info(
        "worker.rescan_done",
        worker=worker,
        rules=RULES_VERSION,
        seconds=round(time.monotonic() - started, 3),
        changed=report.changed,
        scanned=sum(report.scanned.values()),
    )
    return report


async def _renew(sessionmaker: async_sessionmaker[AsyncSession], worker: str, lease: float) -> None:
    while True:
        await asyncio.sleep(lease / 3)
        with contextlib.suppress(Exception):
            async with transaction(sessionmaker) as session:
                await session.execute(_RENEW, {"worker": worker, "lease": lease})
