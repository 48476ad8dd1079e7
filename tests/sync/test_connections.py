from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from app.sync.connections import SyncConnections
from tests.pools import terminate_backends

TRY_LOCK = "SELECT pg_try_advisory_lock(42)"


def test_only_clean_idle_connections_are_kept_and_only_as_many_as_asked(database_url: str) -> None:
    async def go() -> None:
        connections = SyncConnections(database_url, keep=1)
        try:
            first = await connections.acquire()
            await connections.release(first)
            assert await connections.acquire() is first  # kept, and handed out again

            second = await connections.acquire()
            await connections.release(first)
            await connections.release(second)  # one more than `keep`
            assert second.closed
            assert not first.closed

            in_transaction = await connections.acquire()
            assert in_transaction is first
            await in_transaction.execute("BEGIN")
            await connections.release(in_transaction)
            assert in_transaction.closed

            # A connection that may still hold a sync's lock is closed, which frees the lock.
            holder = await connections.acquire()
            await holder.execute(TRY_LOCK)
            await connections.release(holder, clean=False)
            assert holder.closed
            other = await connections.acquire()
            row = await (await other.execute(TRY_LOCK)).fetchone()
            assert row == (True,)
            await connections.release(other, clean=False)

            ended = await connections.acquire()
            await connections.release(ended)
            await ended.close()  # as a dead server leaves it
            assert await connections.acquire() is not ended
        finally:
            await connections.close()

    asyncio.run(go())


def test_a_kept_connection_whose_backend_went_away_is_not_handed_out(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # A watch keeps its connections between syncs; the server (or Postgres's backends after one
    # crashed) may restart meanwhile, which `closed` and `broken` do not show until a use fails.
    async def go() -> tuple[int, ...] | None:
        connections = SyncConnections(database_url, keep=1)
        try:
            kept = await connections.acquire()
            await connections.release(kept)
            assert terminate_backends(db, "agmem-sync") == 1
            fresh = await connections.acquire()
            assert fresh is not kept
            return await (await fresh.execute("SELECT 1")).fetchone()
        finally:
            await connections.close()

    assert asyncio.run(go()) == (1,)
