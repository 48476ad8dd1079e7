"""Concurrent writers of one key: every write lands as a version, none is lost or fails."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from app.db.engine import make_async_engine, make_sessionmaker, transaction
from app.memories.schemas import MemoryWrite
from app.memories.service import write_memory
from tests.conftest import make_settings


async def _write_many(database_url: str, writers: int) -> list[bool]:
    engine = make_async_engine(database_url, pool_size=writers)
    sessionmaker = make_sessionmaker(engine)

    async def one(n: int) -> bool:
        data = MemoryWrite(value=n, scope="shared", created_by=f"agent-{n}")
        async with transaction(sessionmaker) as session:
            _, created = await write_memory(
                session, key="shared.race", data=data, settings=make_settings()
            )
            return created

    try:
        return await asyncio.gather(*(one(n) for n in range(writers)))
    finally:
        await engine.dispose()


def test_concurrent_first_writes_of_one_key(database_url: str, db: psycopg.Connection[Any]) -> None:
    created = asyncio.run(_write_many(database_url, 8))
    assert created.count(True) == 1
    assert db.execute("SELECT version FROM memories").fetchall() == [(8,)]
    versions = db.execute("SELECT version FROM memory_versions ORDER BY version").fetchall()
    assert versions == [(n,) for n in range(1, 8)]
