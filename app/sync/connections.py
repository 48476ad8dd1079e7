"""Where a sync gets its psycopg connections: opened for one run, or kept between runs.

A one-shot `agmem sync` opens its connections and closes them at the end. A process that syncs
again and again (`agmem sync --watch`) keeps them: a kept backend has its catalog caches warm and
pgvector loaded, and no backend start sits on a small re-sync's critical path (a fresh backend
cost ~1.5 ms to start and ~3 ms more on its first HNSW inserts, docs/benchmarks.md, Sync).
"""

from __future__ import annotations

from psycopg import pq

from app.db.alive import usable
from app.db.raw_pool import Conn, connect

# The index mirrors files on disk, so the sync's commits do not wait for the WAL to reach the disk
# (each write transaction's COMMIT waited 0.2-6 ms for it here, docs/benchmarks.md). A crash of
# the machine can lose the last ~0.6 s of them (Postgres stays consistent: a later transaction
# never survives an earlier one); those files then still carry their old (size, mtime), and the
# next sync writes them again.
_SYNC_OPTIONS = "-c synchronous_commit=off"


class SyncConnections:
    """The connections of a sync's lock and writers; `keep` of them stay open between syncs.

    Only a connection handed back clean (idle, no transaction, its advisory lock released) is
    kept; anything else is closed, so a sync never inherits another's lock or transaction.
    """

    def __init__(self, url: str, *, keep: int = 0) -> None:
        self.url = url
        self.keep = keep
        self.idle: list[Conn] = []

    async def acquire(self) -> Conn:
        while self.idle:
            connection = self.idle.pop()
            # Its backend may have gone while it was kept (a restarted server): nothing shows
            # that until a use fails, unless what arrived meanwhile is read (`usable`).
            if not connection.closed and usable(connection):
                return connection
            await connection.close()
        return await connect(self.url, application_name="agmem-sync", options=_SYNC_OPTIONS)

    async def release(self, connection: Conn, *, clean: bool = True) -> None:
        reusable = (
            clean
            and len(self.idle) < self.keep
            and not connection.closed
            and connection.info.transaction_status == pq.TransactionStatus.IDLE
        )
        if reusable:
            self.idle.append(connection)
        else:
            await connection.close()

    async def close(self) -> None:
        """Close the kept connections (a dead server's included: closing never raises)."""
        idle, self.idle = self.idle, []
        for connection in idle:
            await connection.close()
