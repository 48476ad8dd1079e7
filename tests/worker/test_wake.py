"""A wake-up is never lost: one that comes while an idle lane works out how long to sleep (its
query for the next due row) ends that sleep, be it new work or the worker's stop."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from app.db.engine import make_async_engine, make_sessionmaker
from app.worker import loop
from app.worker.loop import Worker
from tests.conftest import make_settings

UNREACHABLE = "postgresql://agmem:pw@127.0.0.1:1/agmem"


def _waits_on(db: psycopg.Connection[Any], table: str, query: str) -> bool:
    """Whether a backend running `query` waits for a lock on `table` (held by the test)."""
    found = db.execute(
        "SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
        "JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE NOT l.granted AND c.relname = %s AND strpos(a.query, %s) > 0",
        (table, query),
    ).fetchone()
    return found is not None


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.01)


@pytest.fixture
def locker(database_url: str) -> Any:
    connections: list[psycopg.Connection[Any]] = []

    def connect() -> psycopg.Connection[Any]:
        connection = psycopg.connect(database_url)
        connections.append(connection)
        return connection

    yield connect
    for connection in connections:
        connection.close()


def test_a_stop_during_the_idle_lanes_query_ends_its_sleep(
    db: psycopg.Connection[Any], database_url: str, locker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stop woke the lanes with an event set and cleared at once: a lane between its last
    # look at the stop and its wait (in its query for the next due row) slept through it, for
    # the poll (5 s: the worker's stop took 5 s longer in 2 of 3 runs of a suite test).
    # Both stretched so that only the wake can end the sleep.
    monkeypatch.setattr(loop, "STOP_GRACE_SECONDS", 3600.0)
    settings = make_settings(
        worker_poll_seconds=3600.0, worker_concurrency=1, worker_purge_interval_seconds=3600.0
    )
    embed_lock, due_lock = locker(), locker()
    db.autocommit = True

    async def run() -> bool:
        engine = make_async_engine(database_url, pool_size=2)
        # No listener (its database unreachable): the test's wake and the stop are the only
        # ones, so the lane goes round exactly when the test says.
        worker = Worker(
            settings=settings, sessionmaker=make_sessionmaker(engine), database_url=UNREACHABLE
        )
        stop, hurry = asyncio.Event(), asyncio.Event()
        running = asyncio.create_task(worker.run(stop, hurry=hurry))
        try:
            await _until(lambda: worker.ctx.embeddings_released)  # the first upkeep is done
            # The locks are taken off the event loop: one waiting there for the lane's claim
            # would stop the lane too. The lane's look for rows to embed waits, then its query
            # for the next due row does: it is between the two, its last look at the stop
            # behind it, when the stop comes. A lane still in its first round when woken goes
            # round once more (into the lock on sync_runs, in its claim): then the lock is let
            # go and the round repeated once it sleeps.
            for _ in range(5):
                # The lane asleep (none of its connections out), the one wake below is its only.
                await _until(lambda: engine.pool.checkedout() == 0)
                await asyncio.to_thread(
                    embed_lock.execute, "LOCK TABLE memory_chunks IN ACCESS EXCLUSIVE MODE"
                )
                worker.wake()
                await _until(lambda: _waits_on(db, "memory_chunks", "embedding IS NULL"))
                await asyncio.to_thread(
                    due_lock.execute, "LOCK TABLE sync_runs IN ACCESS EXCLUSIVE MODE"
                )
                await asyncio.to_thread(embed_lock.commit)
                await _until(
                    lambda: (
                        _waits_on(db, "sync_runs", "min(greatest(")
                        or _waits_on(db, "sync_runs", "FOR UPDATE SKIP LOCKED")
                    )
                )
                if _waits_on(db, "sync_runs", "min(greatest("):
                    break
                await asyncio.to_thread(due_lock.commit)
            else:
                pytest.fail("the lane never waited in its query for the next due row")
            stop.set()
            await _until(worker.ctx.stopping.is_set)  # the run's stop has woken the lanes
            await asyncio.to_thread(due_lock.commit)
            stopped, _ = await asyncio.wait({running}, timeout=30)
            return bool(stopped)
        finally:
            hurry.set()  # the lane, cancelled: the old code's run ends too
            stop.set()
            await running
            await engine.dispose()

    assert asyncio.run(run()), "the lane slept through the stop"
