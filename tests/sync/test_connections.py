from __future__ import annotations

import asyncio

from app.sync.connections import SyncConnections

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
