"""Index rows the worker gave up embedding during a Gemini outage are embedded once it is over:
they stayed without a vector for good (walk-through: 14 rows after a 40-second 403), even after
the key was fixed, the worker restarted or the provider switched back to `local`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from structlog.testing import capture_logs

from app.config import Settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.logs import configure_logging
from app.worker import jobs
from app.worker.loop import Worker
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, RecordedRequest, fake_gemini
from tests.worker.builders import drain, worker_on

MAX_ATTEMPTS = 2


def vectors(request: RecordedRequest) -> FakeResponse:
    return FakeResponse(
        200, {"embeddings": [{"values": [0.5] * 768} for _ in request.body["requests"]]}
    )


def forbidden(_request: RecordedRequest) -> FakeResponse:
    return FakeResponse(
        403, {"error": {"code": 403, "message": "key invalid", "status": "PERMISSION_DENIED"}}
    )


def gemini_settings(fake: FakeGemini, tmp_path: Path) -> Settings:
    return make_settings(
        home=tmp_path / "home",
        gemini_api_key="k",
        gemini_base_url=fake.url,
        embedding_provider="gemini",
        gemini_embed_max_retries=0,
        worker_max_attempts=MAX_ATTEMPTS,
    )


def add_memory_row(db: psycopg.Connection[Any], content: str) -> None:
    memory = uuid.uuid4()
    db.execute(
        "INSERT INTO memories (id, scope, key, value) VALUES (%s, 'global', %s, '1')",
        (memory, content),
    )
    db.execute(
        "INSERT INTO memory_chunks (project_path, source, memory_id, content, hash) "
        "VALUES ('', 'kv', %s, %s, md5(%s))",
        (memory, content, content),
    )


@contextmanager
def an_outage(db: psycopg.Connection[Any], tmp_path: Path, row: str) -> Iterator[Any]:
    """Gemini refusing the key, and one row to embed: (the fake, the worker's settings)."""
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", forbidden)
        settings = gemini_settings(fake, tmp_path)
        add_memory_row(db, row)
        yield fake, settings


@contextmanager
def a_slow_answer(db: psycopg.Connection[Any], tmp_path: Path, row: str) -> Iterator[Any]:
    """Gemini answering once `release` is set (at the latest when the block ends), and one row
    to embed: (the fake, the worker's settings, `release`). Held, not delayed: a fixed delay
    made each test's "while Gemini answers" a race against a loaded machine."""
    release = threading.Event()

    def held(_request: RecordedRequest) -> FakeResponse:
        release.wait(60)
        return FakeResponse(200, {"embeddings": [{"values": [0.5] * 768}]})

    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", held)
        settings = gemini_settings(fake, tmp_path)
        add_memory_row(db, row)
        try:
            yield fake, settings, release
        finally:
            release.set()


async def embedding_under_way(ctx: jobs.JobContext, fake: FakeGemini) -> asyncio.Task[int]:
    """A lane's embedding, once its call has reached Gemini."""
    embedding = asyncio.create_task(jobs.embed_batch(ctx))
    while not fake.calls(":batchEmbedContents"):
        await asyncio.sleep(0.01)
    return embedding


def unembedded(db: psycopg.Connection[Any]) -> list[tuple[str, int]]:
    return db.execute(
        "SELECT content, embed_attempts FROM memory_chunks WHERE embedding IS NULL ORDER BY id"
    ).fetchall()


def test_rows_given_up_in_an_outage_are_embedded_after_the_next_success(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    with an_outage(db, tmp_path, "captured during the outage") as (fake, settings):

        async def go() -> list[int]:
            async with worker_on(settings, database_url) as worker:
                done = [await jobs.embed_batch(worker.ctx) for _ in range(MAX_ATTEMPTS + 1)]
                assert unembedded(db) == [("captured during the outage", MAX_ATTEMPTS)]
                assert len(fake.calls(":batchEmbedContents")) == MAX_ATTEMPTS  # given up
                fake.on(":batchEmbedContents", vectors)
                done.append(await jobs.embed_batch(worker.ctx))
                add_memory_row(db, "captured after it")
                done += [await jobs.embed_batch(worker.ctx) for _ in range(3)]
                return done

        done = asyncio.run(go())

    assert done == [0, 0, 0, 0, 1, 1, 0]
    assert unembedded(db) == []


def test_rows_given_up_in_an_outage_are_embedded_by_the_next_worker(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    with an_outage(db, tmp_path, "captured while the key was wrong") as (fake, settings):
        for _ in range(MAX_ATTEMPTS):
            drain(settings, database_url)
        assert unembedded(db) == [("captured while the key was wrong", MAX_ATTEMPTS)]

        fake.on(":batchEmbedContents", vectors)  # the key fixed, the worker restarted
        drain(settings, database_url)

    assert unembedded(db) == []


def test_a_slow_gemini_never_holds_up_a_write_of_the_rows_being_embedded(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The worker claimed its rows FOR UPDATE and kept them locked through the Gemini call: a
    # PUT or DELETE of a kv memory being embedded waited for it (walk-through: 120 s and more,
    # curl gave up, with Gemini slow).
    with a_slow_answer(db, tmp_path, "being embedded") as (fake, settings, release):

        def delete_the_memory() -> None:
            with psycopg.connect(database_url, autocommit=True) as other:
                other.execute("SET lock_timeout = '1s'")
                other.execute("DELETE FROM memories WHERE key = 'being embedded'")

        async def go() -> int:
            async with worker_on(settings, database_url) as worker:
                embedding = await embedding_under_way(worker.ctx, fake)
                await asyncio.to_thread(delete_the_memory)  # LockNotAvailable while held
                assert not embedding.done()
                release.set()
                return await embedding

        assert asyncio.run(go()) == 0  # its row went while Gemini answered

    assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == (0,)


def test_a_worker_stopped_while_gemini_answers_gives_its_rows_back_at_once(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The lease outlived the stopped worker: the next one left the rows alone for 15 minutes
    # (the lock it replaced went with the transaction).
    with a_slow_answer(db, tmp_path, "embedding when the worker stopped") as (
        fake,
        settings,
        release,
    ):

        async def go() -> None:
            async with worker_on(settings, database_url) as worker:
                embedding = await embedding_under_way(worker.ctx, fake)
                embedding.cancel()  # what a stop past its grace does to a lane
                with contextlib.suppress(asyncio.CancelledError):
                    await embedding
            release.set()  # the call's thread: the event loop's end waits for it

        asyncio.run(go())

    leased = db.execute("SELECT embed_claimed_until IS NOT NULL FROM memory_chunks").fetchone()
    assert leased == (False,)


def test_a_hurried_stop_cuts_the_grace_short_and_gives_the_rows_back(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A second Ctrl-C to `agmem serve` while it shuts down: its worker gave the call in flight
    # its whole grace (up to 10 s) while the user asked it to stop at once.
    with a_slow_answer(db, tmp_path, "embedding when hurried") as (fake, settings, release):

        async def go() -> float:
            engine = make_async_engine(database_url, pool_size=4)
            try:
                worker = Worker(
                    settings=settings,
                    sessionmaker=make_sessionmaker(engine),
                    database_url=database_url,
                    concurrency=1,
                )
                stop, hurry = asyncio.Event(), asyncio.Event()
                running = asyncio.create_task(worker.run(stop, hurry=hurry))
                while not fake.calls(":batchEmbedContents"):
                    await asyncio.sleep(0.01)
                stop.set()
                await asyncio.sleep(0.2)
                hurry.set()
                hurried = time.monotonic()
                await running
                took = time.monotonic() - hurried
                release.set()  # the call's thread: the event loop's end waits for it
                return took
            finally:
                await engine.dispose()

        took = asyncio.run(go())

    assert took < 5  # Gemini does not answer; the grace is 10 s
    row = db.execute("SELECT embedding IS NULL, embed_claimed_until IS NULL FROM memory_chunks")
    assert row.fetchone() == (True, True)


def refusing_poison(request: RecordedRequest) -> FakeResponse:
    texts = [r["content"]["parts"][0]["text"] for r in request.body["requests"]]
    if any("POISON" in text for text in texts):
        return FakeResponse(
            400, {"error": {"code": 400, "message": "bad input", "status": "INVALID_ARGUMENT"}}
        )
    return vectors(request)


def poisoned(fake: FakeGemini) -> int:
    return sum("POISON" in str(r.body) for r in fake.calls(":batchEmbedContents"))


def test_a_text_gemini_refuses_fails_alone_and_stays_given_up(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A 400 for one text failed its whole batch: the rows with it were given up too, and once
    # given-up rows were retried after any success, the refused row came back at the head of
    # every next batch and took the rows captured since down with it.
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", refusing_poison)
        settings = gemini_settings(fake, tmp_path)
        for content in ("POISON row", "good one", "good two"):
            add_memory_row(db, content)

        async def go() -> None:
            async with worker_on(settings, database_url) as worker:
                for _ in range(MAX_ATTEMPTS + 1):
                    await jobs.embed_batch(worker.ctx)
                assert unembedded(db) == [("POISON row", MAX_ATTEMPTS)]
                sent = poisoned(fake)
                for content in ("good three", "good four"):
                    add_memory_row(db, content)
                    for _ in range(2):
                        await jobs.embed_batch(worker.ctx)
                assert poisoned(fake) == sent  # not retried after the later successes

        asyncio.run(go())

    assert unembedded(db) == [("POISON row", MAX_ATTEMPTS)]


def test_a_split_that_embeds_some_rows_logs_them_with_the_refusal(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The refused text's half failed, the other half was embedded, and only `embedding.failed`
    # was logged: the log said nothing of the two rows that got their vectors, and the answer
    # did not count as the provider's return after an outage.
    configure_logging("info")  # see tests/worker/test_log_failure.py
    monkeypatch.setattr(jobs, "log", structlog.get_logger(jobs.__name__))
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", refusing_poison)
        settings = gemini_settings(fake, tmp_path)
        add_memory_row(db, "given up in an outage")
        db.execute(
            "UPDATE memory_chunks SET embed_attempts = %s, embed_error = 'EmbeddingFailed: 403'",
            (MAX_ATTEMPTS,),
        )
        for content in ("good one", "good two", "POISON row"):
            add_memory_row(db, content)

        async def go() -> None:
            async with worker_on(settings, database_url) as worker:
                worker.ctx.embedding_failed = True  # the outage this worker saw
                with capture_logs() as logged:
                    await jobs.embed_batch(worker.ctx)
                events = [
                    (e["event"], e.get("chunks")) for e in logged if "embedding" in e["event"]
                ]
                assert events == [("embedding.done", 2), ("embedding.failed", None)]

        asyncio.run(go())

    # The provider answered for the good rows: the row given up in the outage has its attempts.
    assert unembedded(db) == [("given up in an outage", 0), ("POISON row", 1)]


def test_a_429_asking_for_a_long_wait_pauses_the_rows_without_spending_attempts(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A Retry-After over the 30 s a document call waits failed the call at once and charged an
    # attempt; at a poll each 5 s the rows were given up within seconds, inside the quota window.
    quota = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", lambda _: FakeResponse(429, quota, {"Retry-After": "40"}))
        settings = gemini_settings(fake, tmp_path)
        add_memory_row(db, "written during the quota window")

        async def go() -> None:
            async with worker_on(settings, database_url) as worker:
                for _ in range(MAX_ATTEMPTS + 2):
                    await jobs.embed_batch(worker.ctx)

        asyncio.run(go())
        assert len(fake.calls(":batchEmbedContents")) == 1  # the rows wait out the pause

    assert unembedded(db) == [("written during the quota window", 0)]
    (paused,) = db.execute(
        "SELECT extract(epoch FROM embed_claimed_until - now()) FROM memory_chunks"
    ).fetchone() or (None,)
    assert 30 < paused <= 40
