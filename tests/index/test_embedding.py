from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from typing import Any

import numpy as np
import psycopg
import pytest
from numpy.typing import NDArray
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.db.engine import make_async_engine, make_sessionmaker
from app.db.vector_index import hnsw_index_name
from app.index import embedding
from app.index.embedding import EmbedStats, embed_pending_chunks, store_arrays, vector_literal
from app.index.writer import replace_index_text
from app.llm.ratelimit import DailyBudget, gemini_gate
from app.worker import jobs
from tests.conftest import make_settings
from tests.sync.helpers import CountingEmbedder


def run(database_url: str, embedder: CountingEmbedder, texts: dict[str, list[str]]) -> EmbedStats:
    async def go() -> EmbedStats:
        engine = make_async_engine(database_url)
        sessionmaker = make_sessionmaker(engine)
        try:
            async with sessionmaker() as session, session.begin():
                for memory_key, memory_texts in texts.items():
                    await session.execute(
                        text(
                            "INSERT INTO memories (id, scope, key, value) "
                            "VALUES (CAST(:id AS uuid), 'global', :key, '1')"
                        ),
                        {"id": memory_key, "key": memory_key},
                    )
                    await replace_index_text(
                        session,
                        project_path="/p",
                        source="kv",
                        texts=memory_texts,
                        memory_id=uuid.UUID(memory_key),
                    )
            async with sessionmaker() as session, session.begin():
                return await embed_pending_chunks(session, embedder)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def test_identical_texts_cost_one_embedding_and_cache_serves_repeats(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    embedder = CountingEmbedder()
    first = run(
        database_url,
        embedder,
        {"00000000-0000-0000-0000-000000000001": ["validate token", "validate token", "jwt"]},
    )
    assert (first.chunks, first.computed, first.cached) == (3, 2, 0)
    assert embedder.texts_embedded == 2

    second = run(
        database_url, embedder, {"00000000-0000-0000-0000-000000000002": ["jwt", "new text"]}
    )
    assert (second.chunks, second.computed, second.cached) == (2, 1, 1)
    assert embedder.texts_embedded == 3

    row = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE model = %s AND vector_dims(embedding) = 256) "
        "FROM memory_chunks",
        (embedder.identity,),
    ).fetchone()
    assert row == (5, 5)


def test_provider_failure_counts_an_attempt_and_keeps_rows(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    embedder = CountingEmbedder()
    embedder.fail = True
    stats = run(database_url, embedder, {"00000000-0000-0000-0000-000000000003": ["some text"]})

    assert stats.error is not None
    assert "provider down" in stats.error
    row = db.execute("SELECT embedding IS NULL, embed_attempts, embed_error FROM memory_chunks")
    assert row.fetchone() == (True, 1, "RuntimeError: provider down")


def test_a_database_error_while_embedding_is_raised_as_itself_and_charges_no_attempt(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The provider's failures are recorded on the rows; a database error (a deadlock, a refused
    # write to the cache) aborted the transaction first, so recording it failed in turn and the
    # log showed InFailedSqlTransaction instead of the real error.
    db.execute(
        "ALTER TABLE memory_embedding_cache ADD CONSTRAINT refuse_all CHECK (false) NOT VALID"
    )
    try:
        with pytest.raises((psycopg.Error, DBAPIError)) as raised:
            run(database_url, CountingEmbedder(), {"00000000-0000-0000-0000-000000000004": ["x"]})
    finally:
        db.execute("ALTER TABLE memory_embedding_cache DROP CONSTRAINT refuse_all")

    assert isinstance(getattr(raised.value, "orig", raised.value), psycopg.errors.CheckViolation)
    row = db.execute("SELECT embedding IS NULL, embed_attempts FROM memory_chunks")
    assert row.fetchone() == (True, 0)


def test_vector_literal_is_pgvector_text_with_seven_significant_digits() -> None:
    rng = np.random.default_rng(5)
    for scale in (1e-8, 1e-3, 1.0, 1e3):
        vector = (rng.standard_normal(256) * scale).astype(np.float32)
        expected = "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"
        assert vector_literal(vector) == expected
        assert vector_literal([float(x) for x in vector]) == expected
    assert vector_literal([1, 2.5, -0.0]) == "[1,2.5,-0]"
    assert vector_literal([]) == "[]"


def test_concurrent_cache_writes_of_shared_texts_never_deadlock(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Two worker lanes embed disjoint rows whose texts overlap; each stores its new vectors in
    the one content-addressed cache. Stored in each lane's row order, lane A held `a` and wanted
    `b` while lane B held `b` and wanted `a`: Postgres killed one with DeadlockDetected (seen with
    a 500-observation session, whose lane then logged a traceback and idled a poll interval)."""
    vector = np.ones(256, dtype=np.float32)

    async def go() -> None:
        engine = make_async_engine(database_url)
        sessionmaker = make_sessionmaker(engine)
        try:
            async with sessionmaker() as lane_a, lane_a.begin():
                await store_arrays(lane_a, model="m", vectors={"hash-a": vector})

                async def lane_b() -> None:
                    async with sessionmaker() as session, session.begin():
                        await store_arrays(
                            session, model="m", vectors={"hash-b": vector, "hash-a": vector}
                        )

                other = asyncio.create_task(lane_b())
                for _ in range(500):  # until lane B waits for lane A's row
                    waiting = db.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                    if waiting.fetchone() != (0,):
                        break
                    await asyncio.sleep(0.01)
                await store_arrays(lane_a, model="m", vectors={"hash-a": vector, "hash-b": vector})
            await other
        finally:
            await engine.dispose()

    asyncio.run(go())
    cached = db.execute("SELECT hash FROM memory_embedding_cache ORDER BY hash").fetchall()
    assert cached == [("hash-a",), ("hash-b",)]


class _MeetingEmbedder(CountingEmbedder):
    """Two lanes' embeddings meet here, so both have done everything before it first."""

    def __init__(self) -> None:
        super().__init__()
        self.meeting = threading.Barrier(2, timeout=10)

    def embed_documents(self, texts: list[str]) -> NDArray[np.float32]:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.meeting.wait()  # broken (10 s) when the second lane never gets here
        return super().embed_documents(texts)


def test_two_lanes_first_embedding_of_a_process_never_deadlocks(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """A worker's first embedding makes sure the model's HNSW index exists. Each lane did it in
    its embedding transaction: both held the table's ShareLock, then each one's UPDATE of its
    rows waited for the other's (DeadlockDetected, seen in 2 of 3 `bench.worker` runs of 600
    observations at concurrency 4, on main too)."""
    texts = {"00000000-0000-0000-0000-000000000011": ["text 0", "text 1", "text 2", "text 3"]}
    run(database_url, CountingEmbedder(), texts)
    embedder = _MeetingEmbedder()
    # A fresh install's (or a new model's) first embedding: no vectors, no index yet.
    db.execute("UPDATE memory_chunks SET embedding = NULL, model = NULL")
    db.execute("DELETE FROM memory_embedding_cache")
    db.execute(f"DROP INDEX IF EXISTS {hnsw_index_name(embedder.identity)}")
    embedding._known_indexes.clear()  # this process's first embedding, as in a new worker

    async def go() -> list[int]:
        engine = make_async_engine(database_url)
        settings = make_settings()
        ctx = jobs.JobContext(
            settings,
            make_sessionmaker(engine),
            "w",
            gemini_gate(settings),
            DailyBudget(0),
            None,
            embedder,
        )
        try:
            first = asyncio.create_task(jobs.embed_batch(ctx, limit=2))
            for _ in range(1000):
                if embedder.meeting.n_waiting:  # the first lane is embedding
                    break
                await asyncio.sleep(0.01)
            # The second lane's first embedding too: both make sure of the index.
            embedding._known_indexes.clear()
            second = await jobs.embed_batch(ctx, limit=2)
            return [await first, second]
        finally:
            await engine.dispose()

    assert asyncio.run(go()) == [2, 2]
