"""The purge the worker runs: expired memories go, with their index rows and history."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app.db.engine import make_async_engine, make_sessionmaker, transaction
from app.memories.service import purge_expired
from tests.memories.helpers import put


async def _purge(database_url: str) -> int:
    engine = make_async_engine(database_url, pool_size=1)
    try:
        async with transaction(make_sessionmaker(engine)) as session:
            return await purge_expired(session)
    finally:
        await engine.dispose()


def test_purge_expired_deletes_only_expired(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    put(client, "current.a", 1, ttl=60)
    put(client, "current.a", 2, ttl=60)  # one version in history
    put(client, "current.b", 1, ttl=3600)
    put(client, "project.c", 1)
    db.execute(
        "UPDATE memories SET expires_at = now() - interval '1 second' WHERE key = 'current.a'"
    )
    assert asyncio.run(_purge(database_url)) == 1
    assert db.execute("SELECT key FROM memories ORDER BY key").fetchall() == [
        ("current.b",),
        ("project.c",),
    ]
    assert db.execute("SELECT count(*) FROM memory_versions").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == (2,)
    assert asyncio.run(_purge(database_url)) == 0
