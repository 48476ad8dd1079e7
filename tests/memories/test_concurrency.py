"""Concurrent writers of one key: every write lands as a version, none is lost; racing deletes
are retried a bounded number of rounds, then a 409."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from app.db.engine import make_async_engine, make_sessionmaker, transaction
from app.memories.schemas import MemoryWrite
from app.memories.service import WRITE_ATTEMPTS, VersionConflict, write_memory
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


async def _write_while_deleted(
    database_url: str,
    db: psycopg.Connection[Any],
    *,
    rounds: int = 1,
    inserts: list[str] | None = None,
) -> tuple[bool, int]:
    """A write whose INSERT meets a row that another client deletes before the write can lock it,
    on each of its first `rounds` INSERTs; (created, INSERTs the write made).

    The other client's insert and delete land between the write's statements, as a `PUT` and a
    `DELETE` racing it over HTTP do (5 of 15 `PUT`s in such a burst answered 409)."""
    engine = make_async_engine(database_url, pool_size=1)
    sessionmaker = make_sessionmaker(engine)
    inserts = [] if inserts is None else inserts

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO memories"):
            inserts.append(statement)
            if len(inserts) <= rounds:
                db.execute(
                    "INSERT INTO memories (id, scope, project_path, session_id, key, value, tags) "
                    "VALUES (gen_random_uuid(), 'global', '', '', 'race.gone', '1', '{}')"
                )

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO memories") and len(inserts) <= rounds:
            db.execute("DELETE FROM memories WHERE key = 'race.gone'")

    event.listen(engine.sync_engine, "before_cursor_execute", before)
    event.listen(engine.sync_engine, "after_cursor_execute", after)
    try:
        async with transaction(sessionmaker) as session:
            _, created = await write_memory(
                session,
                key="race.gone",
                data=MemoryWrite(value=2, scope="global"),
                settings=make_settings(),
            )
    finally:
        await engine.dispose()
    return created, len(inserts)


def test_unconditional_write_racing_a_delete_is_stored(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # A write without ifVersion asks for no precondition, so it must not answer 409.
    assert asyncio.run(_write_while_deleted(database_url, db)) == (True, 2)
    rows = db.execute("SELECT value, version FROM memories WHERE key = 'race.gone'").fetchall()
    assert rows == [(2, 1)]


def test_write_that_loses_every_round_to_a_delete_is_a_conflict(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The retries are bounded: a key created and deleted under every INSERT is a 409 after
    # WRITE_ATTEMPTS rounds, not a loop for as long as the other client keeps going.
    inserts: list[str] = []
    with pytest.raises(VersionConflict, match="changed concurrently; retry the write"):
        asyncio.run(
            _write_while_deleted(database_url, db, rounds=WRITE_ATTEMPTS + 1, inserts=inserts)
        )

    assert len(inserts) == WRITE_ATTEMPTS

    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM memory_versions").fetchone() == (0,)
