"""The redaction pass after an upgrade of the privacy rules, run by the worker in the background.

`redaction_state` (one row) holds the rules' version every stored row was last redacted under,
and its generation (`RULES_GENERATION`): only a build whose rules are of a newer generation
rescans, so two builds on one database do not redo the pass against each other. Each worker
asks at start and at every upkeep interval with one SELECT, which finds no row when nothing
changed. When the rows are pending, the claim is a session-level advisory lock on a
connection the pass holds for its length: Postgres drops it the moment the claimant's process
or connection dies, so a killed worker holds nobody up (a lease in the row held the next worker
off for its length). The row's `claimed_by` names the claimant for `agmem status`, which says
"running" only while the lock is held. The claimant runs `app.redaction.redact_stored` (batches
of rows, each its own short transaction) and records today's version at the end. A pass cut
short (a stop, an outage) gives the lock back and the next poll starts it again: the pass
changes nothing twice.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.engine import transaction
from app.privacy import RULES_GENERATION, RULES_VERSION
from app.redaction import BATCH_ROWS, RedactReport, redact_stored

log = structlog.get_logger(__name__)

# The advisory lock's two int4 keys ("agmm", 5): the sync's locks take one bigint key, which
# Postgres keeps apart from two-key locks (pg_locks.objsubid 1 against 2).
CLAIM_KEYS = (1634167149, 5)
_TRY_CLAIM = text("SELECT pg_try_advisory_lock(:k1, :k2)")
_UNCLAIM = text("SELECT pg_advisory_unlock(:k1, :k2)")
_CLAIM_HELD = (
    "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
    f"AND classid = {CLAIM_KEYS[0]} AND objid = {CLAIM_KEYS[1]} AND objsubid = 2)"
)
_KEYS = {"k1": CLAIM_KEYS[0], "k2": CLAIM_KEYS[1]}
# Pending: redacted under other rules of an older generation (NULL: before 0006, or never). A
# build with older rules leaves rows a newer one redacted alone, rather than each redoing the
# pass against the other at every interval.
_PENDING = text(
    "SELECT rules FROM redaction_state WHERE id = 1 AND rules IS DISTINCT FROM :rules "
    "AND (generation IS NULL OR generation < :generation)"
)
_MINE = {"rules": RULES_VERSION, "generation": RULES_GENERATION}
_NAME = text("UPDATE redaction_state SET claimed_by = :worker, claimed_until = NULL WHERE id = 1")
_UNNAME = text("UPDATE redaction_state SET claimed_by = NULL WHERE id = 1 AND claimed_by = :worker")
_DONE = text(
    "UPDATE redaction_state SET rules = :rules, generation = :generation, redacted_at = now(), "
    "claimed_by = NULL, claimed_until = NULL WHERE id = 1"
)
STATE_SQL = text(
    f"SELECT rules, generation, redacted_at, claimed_by, {_CLAIM_HELD} AS running "
    "FROM redaction_state WHERE id = 1"
)


@dataclass(frozen=True)
class RescanState:
    """What `agmem status` says about the stored rows' redaction."""

    rules: str | None
    generation: int | None
    redacted_at: datetime | None
    running_on: str | None

    @property
    def pending(self) -> bool:
        newer = self.generation is not None and self.generation >= RULES_GENERATION
        return self.rules != RULES_VERSION and not newer

    def line(self) -> str:
        if self.rules == RULES_VERSION:
            return (
                f"up to date (rules {RULES_VERSION}, since {self.redacted_at:%Y-%m-%d %H:%M} UTC)"
            )
        if not self.pending:
            return (
                f"up to date: redacted under newer rules ({self.rules}, generation "
                f"{self.generation}) than this build's ({RULES_VERSION}, generation "
                f"{RULES_GENERATION}), which leaves them alone"
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
    running_on = row.claimed_by if row.running else None
    return RescanState(row.rules, row.generation, row.redacted_at, running_on)


_ELSEWHERE = text(
    "SELECT 1 FROM redaction_state WHERE id = 1 AND rules IS DISTINCT FROM :rules "
    f"AND (generation IS NULL OR generation < :generation) AND {_CLAIM_HELD}"
)


async def running_elsewhere(sessionmaker: async_sessionmaker[AsyncSession]) -> bool:
    """Whether a worker holds the claim on a pass that today's rules still need (called when this
    one holds none)."""
    async with transaction(sessionmaker) as session:
        row = (await session.execute(_ELSEWHERE, _MINE)).first()
    return row is not None


async def mark_redacted(session: AsyncSession) -> None:
    """Record that every stored row was just redacted under today's rules (`agmem redact`)."""
    await session.execute(_DONE, _MINE)


async def rescan_if_pending(
    sessionmaker: async_sessionmaker[AsyncSession],
    worker: str,
    *,
    batch_rows: int = BATCH_ROWS,
) -> RedactReport | None:
    """Run the redaction pass if the stored rows were redacted under other rules and no other
    worker is running it; None (one statement, no write) otherwise."""
    async with transaction(sessionmaker) as session:
        if (await session.execute(_PENDING, _MINE)).first() is None:
            return None
    async with sessionmaker() as holder:
        # Autocommit: the lock outlives transactions, and the connection must not sit idle in
        # one for the pass's minutes.
        await holder.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        if not (await holder.execute(_TRY_CLAIM, _KEYS)).scalar_one():
            return None
        try:
            # Pending still? Another worker may have finished it between the two statements.
            claimed = (await holder.execute(_PENDING, _MINE)).first()
            if claimed is None:
                return None
            await holder.execute(_NAME, {"worker": worker})
            return await _pass(sessionmaker, worker, claimed.rules, batch_rows)
        finally:
            await _unclaim(holder, worker)


async def _unclaim(holder: AsyncSession, worker: str) -> None:
    """Give the claim back; a connection that cannot is closed rather than pooled with the lock."""
    try:
        await holder.execute(_UNNAME, {"worker": worker})
        await holder.execute(_UNCLAIM, _KEYS)
    except Exception:
        with contextlib.suppress(Exception):
            await holder.invalidate()


async def _pass(
    sessionmaker: async_sessionmaker[AsyncSession],
    worker: str,
    previous: str | None,
    batch_rows: int,
) -> RedactReport:
    log.info("worker.rescan_started", worker=worker, rules=RULES_VERSION, previous=previous)
    started = time.monotonic()
    report = await redact_stored(sessionmaker, batch_rows=batch_rows)
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
