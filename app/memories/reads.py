"""Exact-key reads of memories: one prepared SELECT, the access count recorded in batches.

An exact-key read is the hot path of every agent. Through the ORM session it cost a
transaction (BEGIN, an UPDATE ... RETURNING that counted the access and purged the key's
expired rows, COMMIT) and SQLAlchemy's session machinery around it: about 3 ms of mostly client
time per read for a 0.4 ms index lookup. Here the read is a single SELECT on an autocommit
psycopg connection (prepared, so Postgres plans it once per connection), and the read's
side effects leave the request:

- the access (accessedAt, accessCount) is recorded in this process by `AccessCounter` and
  written by `flush`: every `memory_access_flush_ms` by a background task, before a list,
  wildcard read or resume (so they see every read this process answered) and at shutdown. A
  crash loses at most the counts of that interval, never a memory; the counts are eventually
  consistent;
- a visible expired row the read skipped is deleted by the same flush (the worker's purge
  deletes the rest), so a read purges even where no worker runs.

The answer's accessCount already includes the read: the stored count plus this process's
reads not flushed yet.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar, cast

import psycopg
import structlog
from psycopg.rows import class_row
from psycopg_pool import PoolClosed
from sqlalchemy import Table, Text, and_, bindparam, func, select
from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.alive import usable
from app.db.engine import transaction
from app.db.models import MemoryRow
from app.db.raw_pool import Conn, RawPool, make_raw_pool
from app.errors import first_line
from app.memories.schemas import Scope
from app.memories.service import LIVE, SPECIFICITY, MemoryNotFound, Visibility, visible_to
from app.state import AppState

if TYPE_CHECKING:
    # An annotation only: `agmem memory` and `agmem mcp` read memories without FastAPI (~0.15 s).
    from fastapi import FastAPI

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class ReadRow:
    """A memory as the exact-key read returns it: the table's columns, whether it is live, and
    the database time of the read."""

    id: uuid.UUID
    scope: str
    project_path: str
    session_id: str
    key: str
    value: Any
    created_by: str | None
    updated_by: str | None
    tags: list[str]
    ttl: int | None
    expires_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime | None
    access_count: int
    live: bool
    read_at: datetime


@lru_cache(maxsize=16)
def read_sql(shape: tuple[Scope | None, bool, bool]) -> tuple[str, dict[str, Any]]:
    """The exact-key read for one reader shape, as psycopg SQL and its constant parameters.

    Every visible row under the key (one per scope at most), most specific first; expired rows
    come too, flagged, so that the read can have them purged without a second lookup.
    """
    scope, has_project, has_session = shape
    table = cast(Table, MemoryRow.__table__)
    visible = and_(
        MemoryRow.key == bindparam("read_key", type_=Text),
        visible_to(
            scope,
            bindparam("vis_project", type_=Text) if has_project else None,
            bindparam("vis_session", type_=Text) if has_session else None,
        ),
    )
    statement = (
        select(*table.c, LIVE.label("live"), func.now().label("read_at"))
        .where(visible)
        .order_by(SPECIFICITY)
    )
    dialect = psycopg_dialect.dialect()  # type: ignore[no-untyped-call]
    compiled = statement.compile(dialect=dialect)
    constants = {
        name: value
        for name, value in compiled.params.items()
        if name not in ("read_key", "vis_project", "vis_session")
    }
    return str(compiled), constants


# Lock order by id: two processes flushing overlapping batches then cannot deadlock.
_FLUSH = """
WITH batch AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(counts)s::int[], %(ats)s::timestamptz[])
        AS b(id, n, at)
), locked AS (
    SELECT m.id FROM memories m JOIN batch b ON b.id = m.id ORDER BY m.id FOR UPDATE OF m
)
UPDATE memories m
SET access_count = m.access_count + b.n, accessed_at = GREATEST(m.accessed_at, b.at)
FROM batch b
WHERE m.id = b.id AND m.id IN (SELECT id FROM locked)
"""

# Only if still expired: a write since the read may have given the row a new expiry.
_PURGE = "DELETE FROM memories WHERE id = ANY(%(ids)s::uuid[]) AND expires_at <= now()"


_RECENT_FLUSHES = 8


@dataclass(slots=True)
class _Pending:
    count: int
    at: datetime


class AccessCounter:
    """Reads this process answered whose access is not in the table yet, and expired rows
    they met; `flush` writes both in one batch."""

    def __init__(self) -> None:
        self._pending: dict[uuid.UUID, _Pending] = {}
        self._in_flight: dict[uuid.UUID, int] = {}
        self._expired: set[uuid.UUID] = set()
        self._lock = asyncio.Lock()
        self.flushes = 0
        # The ids of the last flushes' batches, by flush number, for `unsettled`.
        self._recent: deque[tuple[int, frozenset[uuid.UUID]]] = deque(maxlen=_RECENT_FLUSHES)

    @property
    def has_work(self) -> bool:
        return bool(self._pending or self._expired)

    def unsettled(self, memory_id: uuid.UUID, *, since: int) -> bool:
        """Whether a flush of this memory's count is under way, or committed after flush number
        `since`: a read that began then may or may not have seen it in the table."""
        if memory_id in self._in_flight:
            return True
        if since < self.flushes - len(self._recent):
            return True  # too long ago to tell
        return any(memory_id in ids for number, ids in self._recent if number > since)

    def count(self, memory_id: uuid.UUID, at: datetime) -> int:
        """Record a read; the reads of this memory not yet in the table, this one included."""
        entry = self._pending.get(memory_id)
        if entry is None:
            self._pending[memory_id] = entry = _Pending(0, at)
        entry.count += 1
        entry.at = max(entry.at, at)
        return entry.count + self._in_flight.get(memory_id, 0)

    def expired(self, memory_id: uuid.UUID) -> None:
        self._expired.add(memory_id)

    async def settled(self) -> None:
        """Wait for a flush under way to finish."""
        async with self._lock:
            return

    async def flush(self, connection: Conn) -> int:
        """Write the recorded accesses and purge the expired rows met; the number of memories
        whose count was written. On an error everything stays recorded for the next flush."""
        async with self._lock:
            batch, self._pending = self._pending, {}
            expired, self._expired = self._expired, set()
            self._in_flight = {memory_id: entry.count for memory_id, entry in batch.items()}
            try:
                if batch:
                    ids = sorted(batch)
                    await connection.execute(
                        _FLUSH,
                        {
                            "ids": ids,
                            "counts": [batch[i].count for i in ids],
                            "ats": [batch[i].at for i in ids],
                        },
                    )
                if expired:
                    await connection.execute(_PURGE, {"ids": list(expired)})
            except BaseException:
                for memory_id, entry in batch.items():
                    self._merge(memory_id, entry)
                self._expired |= expired
                raise
            finally:
                self._in_flight = {}
            # No await between the commit's return and here: a read sees the counts either in
            # flight or in the table, and `flushes` tells it which snapshot it may have had.
            self.flushes += 1
            self._recent.append((self.flushes, frozenset(batch)))
        if expired:
            log.info("memory.purged_on_read", count=len(expired))
        return len(batch)

    def _merge(self, memory_id: uuid.UUID, entry: _Pending) -> None:
        current = self._pending.get(memory_id)
        if current is None:
            self._pending[memory_id] = entry
        else:
            current.count += entry.count
            current.at = max(current.at, entry.at)


async def read_on(
    connection: Conn, counter: AccessCounter, *, key: str, visibility: Visibility
) -> ReadRow:
    """The most specific live visible memory under `key`, its access recorded in `counter`."""
    sql, constants = read_sql(visibility.shape)
    params = {**constants, "read_key": key, **visibility.params()}
    for attempt in range(3):
        before = counter.flushes
        async with connection.cursor(row_factory=class_row(ReadRow)) as cursor:
            await cursor.execute(sql, params, prepare=True)
            rows = await cursor.fetchall()
        found = next((row for row in rows if row.live), None)
        # A flush of this memory's count that committed while the SELECT ran may or may not be
        # in its snapshot; read again once it is over, so that the answer's count neither skips
        # nor repeats it (after a third overlap in a row the answer is taken as it is: the
        # stored count stays exact regardless). Flushes of other memories do not matter.
        if found is None or attempt == 2 or not counter.unsettled(found.id, since=before):
            break
        await counter.settled()
    for row in rows:
        if not row.live:
            counter.expired(row.id)
    if found is None:
        raise MemoryNotFound(f"no memory {key!r} is visible here{visibility.describe()}")
    unflushed = counter.count(found.id, found.read_at)
    found.access_count += unflushed
    found.accessed_at = found.read_at
    return found


class MemoryReads:
    """The app's exact-key reads: their own small autocommit pool and the access counter."""

    def __init__(self, pool: RawPool) -> None:
        self.pool = pool
        self.counter = AccessCounter()

    async def read(self, *, key: str, visibility: Visibility) -> ReadRow:
        """The most specific live visible memory under `key`, with its access counted."""
        return await self._on_live_connection(
            lambda connection: read_on(connection, self.counter, key=key, visibility=visibility)
        )

    async def _on_live_connection(self, work: Callable[[Conn], Awaitable[T]]) -> T:
        while True:
            pool = self.pool
            try:
                async with pool.connection() as connection:
                    # An idle connection whose backend went away is given back (the pool
                    # replaces it) before anything is sent down it; the work takes another.
                    if usable(connection):
                        return await work(connection)
            except PoolClosed:
                if pool is self.pool:  # shutting down
                    raise
                # It waited for a connection of the pool a restart retired: none was used.

    def replace_pool(self, pool: RawPool) -> RawPool:
        """Read through `pool` from now on (the server was restarted); returns the previous pool,
        to be closed. A read waiting for one of its connections then moves to `pool`."""
        stale, self.pool = self.pool, pool
        return stale

    async def flush(self) -> int:
        """Write the accesses recorded so far (a no-op without any)."""
        if not self.counter.has_work:
            return 0
        return await self._on_live_connection(self.counter.flush)

    async def flush_every(self, seconds: float, stop: asyncio.Event) -> None:
        """Flush until `stop`; a failed flush keeps its counts and is logged, never fatal."""
        while not stop.is_set():
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), seconds)
            await self._flush_logged()

    async def _flush_logged(self) -> None:
        try:
            await self.flush()
        except psycopg.Error as error:
            log.warning("memory.access_flush_failed", error=first_line(error))


async def read_in_session(session: AsyncSession, *, key: str, visibility: Visibility) -> ReadRow:
    """The exact-key read inside a caller's transaction (CLI, MCP over stdio): the same SELECT,
    its access written before the transaction commits."""
    connection = await session.connection()
    raw = await connection.get_raw_connection()
    driver = cast(Conn, raw.driver_connection)
    counter = AccessCounter()
    row = await read_on(driver, counter, key=key, visibility=visibility)
    await counter.flush(driver)
    return row


async def read_memory(state: AppState, *, key: str, visibility: Visibility) -> ReadRow:
    """An exact-key read for the HTTP and MCP surfaces: the app's read path while it runs,
    else (MCP over stdio) a transaction of its own."""
    if state.memory_reads is not None:
        return await state.memory_reads.read(key=key, visibility=visibility)
    async with transaction(state.sessionmaker) as session:
        return await read_in_session(session, key=key, visibility=visibility)


async def flush_reads(state: AppState) -> None:
    """Write the accesses this process has recorded, so that a list that follows shows them."""
    if state.memory_reads is not None:
        await state.memory_reads.flush()


READS_POOL_TIMEOUT_SECONDS = 3.0


def make_reads_pool(url: str, *, pool_size: int) -> RawPool:
    # Reads hold a connection for one round trip: two stay open, more open under a burst (and
    # close again after ten idle minutes), so that an idle server adds two backends. These
    # connections write only access counts and purges of expired rows: a commit need not wait
    # for the WAL flush (a few ms here, during which reads of the memories being flushed wait to
    # re-read). A crash can lose the last counts, never a memory.
    return make_raw_pool(
        url,
        application_name="agmem-memories",
        min_size=min(2, pool_size),
        max_size=pool_size,
        options="-c synchronous_commit=off",
        # With the database down, a read waits for the pool's background connector this long
        # before its 503: 30 s (the pool's usual wait) left an agent hanging where every other
        # route answers at once. A healthy burst gets a connection in tens of milliseconds.
        timeout=READS_POOL_TIMEOUT_SECONDS,
    )


@asynccontextmanager
async def memory_reads_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's lifespan: the reads' pool, and the flush task until shutdown."""
    state: AppState = app.state.agmem
    pool = make_reads_pool(state.database_url, pool_size=state.settings.db_pool_size)
    # Not waiting for the connections: the app must start (and answer 503) with the database down.
    await pool.open(wait=False)
    reads = MemoryReads(pool)
    state.memory_reads = reads

    async def replace_pool() -> None:
        fresh = make_reads_pool(state.database_url, pool_size=state.settings.db_pool_size)
        await fresh.open(wait=False)
        await reads.replace_pool(fresh).close()

    state.after_restart.append(replace_pool)
    stop = asyncio.Event()
    flusher = asyncio.create_task(
        reads.flush_every(state.settings.memory_access_flush_ms / 1000, stop)
    )
    try:
        yield
    finally:
        stop.set()
        await flusher
        state.memory_reads = None
        state.after_restart.remove(replace_pool)
        await reads.pool.close()
