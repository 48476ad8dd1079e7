"""The queue itself: leases, expiry, exhausted claims, backoff, parallel workers."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from typing import Any

import psycopg

from app.db.engine import make_async_engine, make_sessionmaker, transaction
from app.worker import claims
from app.worker.claims import backoff_seconds, claim_observations
from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.worker.builders import drain, make_observation, make_session, row, rows, run_until


async def _claim(url: str, worker: str, lease: float, max_attempts: int = 5) -> list[str]:
    engine = make_async_engine(url, pool_size=1)
    try:
        async with transaction(make_sessionmaker(engine)) as session:
            work = await claim_observations(
                session, worker=worker, lease=lease, limit=10, max_attempts=max_attempts
            )
        return [w.id for w in work]
    finally:
        await engine.dispose()


def test_a_claim_is_a_lease_that_expires(db: psycopg.Connection[Any], database_url: str) -> None:
    make_session(db)
    make_observation(db, "o1")

    assert asyncio.run(_claim(database_url, "a", lease=0.5)) == ["o1"]
    time.sleep(0.6)
    assert asyncio.run(_claim(database_url, "b", lease=60)) == ["o1"]
    # Held while its lease runs: a minute, where a lease of 0.5 s could run out before this
    # claim came on a loaded machine (a new engine and connection each).
    assert asyncio.run(_claim(database_url, "c", lease=60)) == []

    claimed = row(db, "SELECT locked_by, attempts FROM observations")
    assert (claimed["locked_by"], claimed["attempts"]) == ("b", 2)


def test_an_expired_last_attempt_ends_failed(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "o1")
    assert asyncio.run(_claim(database_url, "dead", lease=0.1, max_attempts=1)) == ["o1"]
    time.sleep(0.2)

    drain(make_settings(worker_max_attempts=1), database_url)

    failed = row(db, "SELECT * FROM observations")
    assert failed["status"] == "failed"
    assert "claim expired on the last attempt" in failed["last_error"]
    assert failed["result"] is not None  # raw data kept


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    for attempts, ceiling in ((1, 5.0), (2, 10.0), (3, 20.0), (10, 60.0)):
        delays = [backoff_seconds(attempts, base=5.0, cap=60.0) for _ in range(200)]
        assert all(2.5 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 100  # jittered, not a fixed step


def test_two_workers_never_process_the_same_observation(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    total = 40
    for n in range(total):
        make_observation(db, f"o{n}")
    settings = make_settings(
        gemini_api_key="k",
        gemini_requests_per_minute=100_000,
        gemini_max_concurrent=8,
    )
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=text_answer("Learned: x"), delay_s=0.05),
        )
        settings = settings.model_copy(update={"gemini_base_url": fake.url})
        run_until(
            settings,
            database_url,
            lambda: (
                row(db, "SELECT count(*) AS n FROM observations WHERE status = 'compressed'")["n"]
                == total
            ),
            workers=2,
            concurrency=4,
            timeout=60,
        )
        calls = fake.calls(":generateContent")

    seen = Counter(
        re.search(r"src/(o\d+)\.ts", c.body["contents"][0]["parts"][0]["text"]).group(1)  # type: ignore[union-attr]
        for c in calls
    )
    assert len(calls) == total
    assert seen == Counter({f"o{n}": 1 for n in range(total)})
    assert {r["attempts"] for r in rows(db, "SELECT attempts FROM observations")} == {1}


def test_a_session_waits_for_its_observations(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, status="ending")
    make_observation(db, "o1")
    db.execute("UPDATE observations SET next_attempt_at = now() + interval '1 hour'")

    drain(make_settings(), database_url)
    assert row(db, "SELECT status FROM sessions")["status"] == "ending"

    db.execute("UPDATE observations SET next_attempt_at = NULL")
    drain(make_settings(), database_url)
    assert row(db, "SELECT status FROM sessions")["status"] == "summarized"


async def _seconds_until_next_due(url: str) -> float | None:
    engine = make_async_engine(url, pool_size=1)
    try:
        async with transaction(make_sessionmaker(engine)) as session:
            return await claims.seconds_until_next_due(session)
    finally:
        await engine.dispose()


def test_an_idle_worker_sleeps_until_a_waiting_sessions_observation_is_due(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    """An ended session whose call waits out a 429's hour-long pause is not due before it: the
    idle lanes woke every 50 ms for the hour (330 transactions a second, measured), because the
    session itself was due since its end. The compression wakes them (its index row notifies)."""
    make_session(db, status="ending")
    db.execute("UPDATE sessions SET next_attempt_at = now()")
    make_observation(db, "o1")
    db.execute("UPDATE observations SET next_attempt_at = now() + interval '1 hour'")

    due = asyncio.run(_seconds_until_next_due(database_url))

    assert due is not None
    assert 3590 < due <= 3600


def test_retry_failed_requeues_sessions_too(db: psycopg.Connection[Any], database_url: str) -> None:
    make_session(db, status="failed")
    make_session(db, "other", status="failed", project_path="/elsewhere")

    async def retry() -> tuple[int, int, int]:
        engine = make_async_engine(database_url, pool_size=1)
        try:
            async with transaction(make_sessionmaker(engine)) as session:
                return await claims.retry_failed(session, project_path="/home/dev/shop")
        finally:
            await engine.dispose()

    assert asyncio.run(retry()) == (0, 1, 0)
    statuses = {r["id"]: r["status"] for r in rows(db, "SELECT id, status FROM sessions")}
    assert statuses == {"s1": "ending", "other": "failed"}
