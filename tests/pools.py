"""Replacing a raw pool under a statement that waits for one of its connections."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

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
    waiting: Awaitable[T], replace: Callable[[RawPool], RawPool], fresh: RawPool
) -> T:
    """Start `waiting` (it waits for a connection), then swap `fresh` in and close the old pool."""
    task = asyncio.ensure_future(waiting)
    await asyncio.sleep(0.2)  # it waits for a connection of the unreachable pool by now
    await fresh.open(wait=True)
    await replace(fresh).close()
    return await task
