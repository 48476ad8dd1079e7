"""The exact-key read path: counts recorded in process and flushed in batches, purge on read."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.db.engine import make_async_engine, make_sessionmaker, transaction
from app.db.raw_pool import libpq_url
from app.main import create_app
from app.memories import reads
from app.memories.schemas import MemoryWrite
from app.memories.service import MemoryNotFound, Visibility, write_memory
from tests.conftest import make_settings
from tests.memories.helpers import PROJECT, put, url
from tests.pools import replaced_while_waiting, terminate_backends, unreachable_pool

T = TypeVar("T")
SEEN = {"projectPath": PROJECT}


@pytest.fixture
def app_client(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> Callable[..., TestClient]:
    """A client on the real app with chosen settings (e.g. the flush interval)."""

    def make(**overrides: Any) -> TestClient:
        settings = make_settings(home=tmp_path / "home", **overrides)
        return TestClient(create_app(settings, database_url=database_url))

    return make


def _count(db: psycopg.Connection[Any], key: str) -> tuple[int, Any]:
    row = db.execute("SELECT access_count, accessed_at FROM memories WHERE key = %s", [key])
    found = row.fetchone()
    assert found is not None
    return found[0], found[1]


def test_background_flush_writes_the_counts(
    app_client: Callable[..., TestClient], db: psycopg.Connection[Any]
) -> None:
    with app_client(memory_access_flush_ms=20) as client:
        put(client, "project.port", 3000)
        answers = [client.get(url("project.port"), params=SEEN).json() for _ in range(3)]
        assert [a["accessCount"] for a in answers] == [1, 2, 3]
        deadline = time.monotonic() + 60
        while _count(db, "project.port")[0] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        count, accessed_at = _count(db, "project.port")
        assert count == 3
        assert accessed_at is not None
        # The stored count and the unflushed reads add up without counting a read twice.
        assert client.get(url("project.port"), params=SEEN).json()["accessCount"] == 4


def test_counts_not_flushed_yet_are_written_at_shutdown(
    app_client: Callable[..., TestClient], db: psycopg.Connection[Any]
) -> None:
    with app_client(memory_access_flush_ms=60_000) as client:
        put(client, "current.task", "auth")
        for _ in range(2):
            assert client.get(url("current.task"), params=SEEN).status_code == 200
        assert _count(db, "current.task")[0] == 0
    assert _count(db, "current.task")[0] == 2


def test_a_list_and_resume_see_every_read_before_them(
    app_client: Callable[..., TestClient], db: psycopg.Connection[Any]
) -> None:
    with app_client(memory_access_flush_ms=60_000) as client:
        put(client, "current.task", "auth")
        client.get(url("current.task"), params=SEEN)
        listed = client.get("/api/memories", params=SEEN).json()["memories"]
        assert listed[0]["accessCount"] == 2
        resumed = client.post("/api/resume", json=SEEN).json()
        assert resumed["context"]["current"][0]["accessCount"] == 3
        assert _count(db, "current.task")[0] == 3


def test_an_expired_memory_met_by_a_read_is_purged_without_a_worker(
    app_client: Callable[..., TestClient], db: psycopg.Connection[Any]
) -> None:
    with app_client(memory_access_flush_ms=20) as client:
        put(client, "current.mode", "global value", scope="global")
        put(client, "current.mode", "project value", ttl=3600)
        db.execute("UPDATE memories SET expires_at = now() - interval '1 s' WHERE scope='project'")
        got = client.get(url("current.mode"), params=SEEN).json()
        # The expired project value no longer shadows the global one.
        assert (got["value"], got["scope"]) == ("global value", "global")
        deadline = time.monotonic() + 60
        while db.execute("SELECT count(*) FROM memories").fetchone() != (1,):
            assert time.monotonic() < deadline, "the expired memory was not purged"
            time.sleep(0.02)
    assert db.execute("SELECT scope FROM memories").fetchall() == [("global",)]
    assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == (1,)


def _run(database_url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    async def main() -> T:
        engine = make_async_engine(database_url, pool_size=2)
        maker = make_sessionmaker(engine)
        async with transaction(maker) as session:
            await write_memory(
                session,
                key="shared.hot",
                data=MemoryWrite(value="v", scope="shared"),
                settings=make_settings(),
            )
        try:
            return await work(maker)
        finally:
            await engine.dispose()

    return asyncio.run(main())


READS = 600


async def _open_reads(database_url: str, *, pool_size: int) -> reads.MemoryReads:
    pool = reads.make_reads_pool(database_url, pool_size=pool_size)
    await pool.open(wait=True)
    return reads.MemoryReads(pool)


def test_concurrent_reads_answer_every_count_once(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Reads racing a flush every millisecond: each answer's count is distinct, none lost."""

    async def work(_: Any) -> list[int]:
        memory_reads = await _open_reads(database_url, pool_size=4)
        pool = memory_reads.pool
        stop = asyncio.Event()
        flusher = asyncio.create_task(memory_reads.flush_every(0.001, stop))
        try:
            rows = []
            for _ in range(3):  # in waves, so that reads start while flushes are under way
                rows += await asyncio.gather(
                    *(
                        memory_reads.read(key="shared.hot", visibility=Visibility())
                        for _ in range(READS // 3)
                    )
                )
        finally:
            stop.set()
            await flusher
            await pool.close()
        return [row.access_count for row in rows]

    counts = _run(database_url, work)
    assert sorted(counts) == list(range(1, READS + 1))
    assert _count(db, "shared.hot")[0] == READS


def test_a_failed_flush_keeps_its_counts(database_url: str, db: psycopg.Connection[Any]) -> None:
    async def work(maker: Any) -> None:
        counter = reads.AccessCounter()
        async with await psycopg.AsyncConnection.connect(
            libpq_url(database_url), autocommit=True
        ) as connection:
            for _ in range(2):
                await reads.read_on(connection, counter, key="shared.hot", visibility=Visibility())
            broken = await psycopg.AsyncConnection.connect(libpq_url(database_url))
            await broken.close()
            with pytest.raises(psycopg.OperationalError):
                await counter.flush(broken)
            assert counter.has_work
            assert await counter.flush(connection) == 1
        assert not counter.has_work

    _run(database_url, work)
    assert _count(db, "shared.hot")[0] == 2


def test_a_read_in_a_transaction_writes_its_count_with_it(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    async def work(maker: Any) -> list[int]:
        counts = []
        for _ in range(2):
            async with transaction(maker) as session:
                row = await reads.read_in_session(
                    session, key="shared.hot", visibility=Visibility()
                )
                counts.append(row.access_count)
        async with transaction(maker) as session:
            with pytest.raises(MemoryNotFound):
                await reads.read_in_session(session, key="shared.cold", visibility=Visibility())
        return counts

    assert _run(database_url, work) == [1, 2]
    assert _count(db, "shared.hot")[0] == 2


def test_an_exact_read_answers_503_promptly_when_the_database_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # API.md: 503 with Retry-After when the database is unreachable, as every other route does
    # at once; the reads' own pool used to wait 30 s for a connection first. The pool's wait is
    # shortened here (the test waited its 3 s out); its bound, not its length, is the point.
    assert reads.READS_POOL_TIMEOUT_SECONDS <= 5
    monkeypatch.setattr(reads, "READS_POOL_TIMEOUT_SECONDS", 0.3)
    settings = make_settings(home=tmp_path / "home")
    app = create_app(settings, database_url="postgresql://nobody@127.0.0.1:1/none")
    with TestClient(app, raise_server_exceptions=False) as client:
        started = time.monotonic()
        answer = client.get("/api/memories/project.stack", params={"scope": "global"})
        waited = time.monotonic() - started
    assert answer.status_code == 503
    assert answer.json()["error"] == "DatabaseUnavailable"
    assert answer.headers["retry-after"]
    assert waited < 10


def test_a_read_waiting_on_a_replaced_pool_runs_on_the_new_one(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # After a restart of the embedded server the app swaps in a fresh pool and closes the old
    # one: a read that was waiting for a connection of the old one is not failed by that.
    async def work(_: Any) -> Any:
        down = await unreachable_pool(lambda url: reads.make_reads_pool(url, pool_size=2))
        memory_reads = reads.MemoryReads(down)
        fresh = reads.make_reads_pool(database_url, pool_size=2)
        try:
            read = memory_reads.read(key="shared.hot", visibility=Visibility())
            return await replaced_while_waiting(read, down, memory_reads.replace_pool, fresh)
        finally:
            await fresh.close()

    row = _run(database_url, work)
    assert (row.key, row.access_count) == ("shared.hot", 1)


def test_a_read_after_its_pools_backends_were_terminated_answers(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The pool keeps idle connections whose backends can go (pg_terminate_backend, Postgres
    # restarting its backends after one crashed): a read takes a live one, not a 503.
    async def work(_: Any) -> list[int]:
        memory_reads = await _open_reads(database_url, pool_size=3)
        pool = memory_reads.pool
        try:
            await asyncio.gather(
                *(memory_reads.read(key="shared.hot", visibility=Visibility()) for _ in range(3))
            )
            assert terminate_backends(db, "agmem-memories") >= 2
            rows = await asyncio.gather(
                *(memory_reads.read(key="shared.hot", visibility=Visibility()) for _ in range(3))
            )
            # The access flush (before a list, and every few seconds) as well.
            assert terminate_backends(db, "agmem-memories") >= 1
            assert await memory_reads.flush() == 1
            return sorted(row.access_count for row in rows)
        finally:
            await pool.close()

    assert _run(database_url, work) == [4, 5, 6]
    assert _count(db, "shared.hot")[0] == 6
