"""Raw pools losing their connections: replaced under a waiting statement, or their backends
terminated under them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from app.db.raw_pool import RawPool

T = TypeVar("T")

# No server listens on port 1: a pool on it never gets a connection.
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"


async def unreachable_pool(make: Callable[[str], RawPool]) -> RawPool:
    """An open pool that would keep a caller waiting for a connection for 30 s."""
    pool = make(UNREACHABLE)
    pool.timeout = 30.0
    await pool.open(wait=False)
    return pool


async def replaced_while_waiting(
    waiting: Awaitable[T], old: RawPool, replace: Callable[[RawPool], RawPool], fresh: RawPool
) -> T:
    """Start `waiting`, and once it waits for a connection of `old`, swap `fresh` in and close
    `old`."""
    task = asyncio.ensure_future(waiting)
    # Seen waiting, not slept for (0.2 s was not always enough on a loaded machine: the swap
    # then came first and the statement simply ran on the fresh pool, proving nothing). The
    # deadline is a hang guard only: the unreachable pool holds a waiter for 30 s.
    deadline = asyncio.get_running_loop().time() + 25
    while old.get_stats().get("requests_waiting", 0) < 1:
        assert not task.done(), task.result()
        assert asyncio.get_running_loop().time() < deadline, "it never waited for a connection"
        await asyncio.sleep(0.01)
    await fresh.open(wait=True)
    await replace(fresh).close()
    return await task


def terminate_backends(db: psycopg.Connection[Any], application_name: str) -> int:
    """Terminate the backends of this database's connections named `application_name`, and
    wait until they are gone (their sockets closed); how many there were."""
    terminated = db.execute(
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
        "WHERE application_name = %s AND datname = current_database()",
        [application_name],
    ).fetchall()
    return len(terminated)
