"""Bulk HNSW build for large initial syncs: drop the model's index, load, build it once.

pgvector maintains an HNSW index row by row at ~1.9 ms of Postgres CPU a chunk on this machine,
against ~0.5 ms a row to build it over the loaded rows (docs/benchmarks.md, Sync). The index is
shared by every project using the model, so the bulk path is taken only when it cannot cost the
other projects much (the decision and its trade-offs are in docs/sync.md):

- the sync expects at least `AGMEM_SYNC_BULK_INDEX_MIN_CHUNKS` new chunks, and
- the index covers at most `AGMEM_SYNC_BULK_INDEX_MAX_ROWS` rows and no more rows than the sync
  expects to add, so the rebuild costs at most what the sync adds and, while the index is gone,
  other projects' vector searches scan a bounded number of rows (exact results, slower).

Both DDL statements run CONCURRENTLY: searches and writes of other projects are never blocked.
Writers in other processes keep writing; the rebuild takes their rows in. The index is rebuilt
in a `finally`. DDL on the index runs under a per-model advisory lock, so an invalid index seen
under it is the leftover of an interrupted build (not another sync's build in progress): it is
dropped and built again.

A stop (Ctrl-C, the watch's stop, the worker's cancel) waits for a build under way: a `CREATE
INDEX CONCURRENTLY` cut short leaves an invalid index that Postgres keeps updating and never
uses, and once the model holds more rows than the bulk path takes, no bulk build would come to
drop it. What still cuts one short (SIGTERM, which ends the event loop, or a second Ctrl-C) is
repaired by the next sync: `repair_invalid_index`.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.vector_index import drop_hnsw_index_ddl, hnsw_index_ddl, hnsw_index_valid
from app.llm.embeddings import Embedder
from app.sync import queries
from app.sync.discover import FoundFile

log = structlog.get_logger(__name__)

_ROWS_UP_TO = text(
    "SELECT count(*) FROM (SELECT 1 FROM memory_chunks WHERE model = :model LIMIT :cap) AS r"
)


def expected_chunks(files: list[FoundFile], settings: Settings) -> int:
    """A low estimate of the chunks `files` will make: one per chunk-size of bytes, at least one
    a file (overlap and markdown section breaks only add chunks; transcripts' JSON shrinks)."""
    step = settings.sync_chunk_tokens * 4
    return sum(max(1, f.size // step) for f in files)


async def begin_bulk_index(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    embedder: Embedder,
    files: list[FoundFile],
) -> bool:
    """Drop the model's HNSW index when this sync qualifies for a bulk build (see above)."""
    expected = expected_chunks(files, settings)
    if settings.sync_bulk_index_min_chunks == 0 or expected < settings.sync_bulk_index_min_chunks:
        return False
    cap = min(settings.sync_bulk_index_max_rows, expected)
    async with sessionmaker() as session:
        indexed = (
            await session.execute(_ROWS_UP_TO, {"model": embedder.identity, "cap": cap + 1})
        ).scalar_one()
    if indexed > cap:
        return False
    await _index_ddl(sessionmaker, embedder, drop_hnsw_index_ddl(embedder.identity))
    log.info("sync.bulk_index", model=embedder.identity, expected_chunks=expected, rows=indexed)
    return True


async def end_bulk_index(
    sessionmaker: async_sessionmaker[AsyncSession], embedder: Embedder
) -> None:
    """Build the model's HNSW index over every row now holding the model (all projects); a
    cancel while it builds waits for the build, then goes on."""
    build = asyncio.ensure_future(_build(sessionmaker, embedder))
    try:
        await asyncio.shield(build)
    except asyncio.CancelledError:
        # The stop stays a stop: a build that fails meanwhile is logged (the next sync repairs
        # its index), not raised in the cancel's place (the watch took it for a failed sync).
        try:
            await build
        except Exception as error:
            log.warning("sync.bulk_index_failed", model=embedder.identity, error=str(error))
        raise
    log.info("sync.bulk_index_built", model=embedder.identity)


async def _build(
    sessionmaker: async_sessionmaker[AsyncSession], embedder: Embedder, *, wait: bool = True
) -> bool:
    try:
        return await _index_ddl(
            sessionmaker,
            embedder,
            hnsw_index_ddl(embedder.identity, embedder.dims, concurrently=True),
            wait=wait,
        )
    except BaseException:
        _checked.discard(embedder.identity)  # the next sync looks again
        raise


# The models whose index this process has found valid (or rebuilt).
_checked: set[str] = set()


async def repair_invalid_index(
    sessionmaker: async_sessionmaker[AsyncSession], embedder: Embedder
) -> None:
    """Once a process, rebuild the model's HNSW index if an interrupted build left it invalid."""
    if embedder.identity in _checked:
        return
    async with sessionmaker() as session:
        connection = await session.connection()
        valid = await hnsw_index_valid(connection, model=embedder.identity)
    # A build in progress (another sync's) shows the index invalid too: only one nobody runs,
    # seen under the model's lock, is a leftover. Busy, the lock is not waited for (a sync of
    # another project would stall for the whole build) and the next sync looks again.
    if valid is False and not await _build(sessionmaker, embedder, wait=False):
        return
    _checked.add(embedder.identity)


async def _index_ddl(
    sessionmaker: async_sessionmaker[AsyncSession],
    embedder: Embedder,
    ddl: str,
    *,
    wait: bool = True,
) -> bool:
    """Run `ddl` (CONCURRENTLY: autocommit) under the model's index lock, an invalid leftover
    index dropped first; with `wait` False, only if the lock is free (False when it was not)."""
    key = "agmem.hnsw:" + embedder.identity
    async with sessionmaker() as session:
        if wait:
            await queries.hold_lock(session, key)
        elif not await queries.try_lock(session, key):
            return False
        try:
            connection = await session.connection()
            if await hnsw_index_valid(connection, model=embedder.identity) is False:
                log.warning("sync.hnsw_index_invalid", model=embedder.identity)
                await connection.execute(text(drop_hnsw_index_ddl(embedder.identity)))
            await connection.execute(text(ddl))
        finally:
            try:
                await queries.release_lock(session, key)
            except Exception:
                # A cancel mid-statement leaves the session needing a rollback; the lock is the
                # connection's, so it goes with the connection, which must not return to the pool.
                with contextlib.suppress(Exception):
                    await session.invalidate()
    return True
