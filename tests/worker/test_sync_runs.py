"""Queued sync runs are executed by the worker, and a run abandoned mid-way is queued again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg

from app.db.engine import make_async_engine, make_sessionmaker, transaction
from app.worker.claims import claim_sync_runs
from tests.conftest import make_settings
from tests.sync.helpers import make_project
from tests.worker.builders import drain, row


def test_worker_executes_a_queued_sync_run(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "shop")
    db.execute(
        "INSERT INTO sync_runs (project_path, memory_dir, sessions_dir) VALUES (%s, %s, %s)",
        (str(project), str(project), str(project / "sessions")),
    )

    drain(make_settings(), database_url)

    run = row(db, "SELECT * FROM sync_runs")
    assert run["status"] == "done", run["errors"]
    assert run["stats"]["filesScanned"] >= 4
    assert (run["locked_by"], run["locked_until"], run["attempts"]) == (None, None, 1)
    chunks = row(
        db,
        "SELECT count(*) AS n, count(embedding) AS embedded FROM memory_chunks "
        "WHERE project_path = %s AND source IN ('memory', 'sessions')",
        str(project),
    )
    assert chunks["n"] > 0
    assert chunks["embedded"] == chunks["n"]


def test_a_run_left_running_by_a_dead_worker_is_queued_again(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "shop")
    db.execute(
        "INSERT INTO sync_runs (project_path, memory_dir, status, attempts, locked_by, "
        "locked_until) VALUES (%s, %s, 'running', 1, 'dead', now() - interval '1 second')",
        (str(project), str(project)),
    )

    drain(make_settings(), database_url)

    run = row(db, "SELECT * FROM sync_runs")
    assert run["status"] == "done"
    assert run["attempts"] == 2
    assert "worker lost during the run" in run["last_error"]


async def _claim_runs(url: str, worker: str) -> list[str]:
    engine = make_async_engine(url, pool_size=1)
    try:
        async with transaction(make_sessionmaker(engine)) as session:
            work = await claim_sync_runs(session, worker=worker, lease=30, limit=10, max_attempts=5)
        return [str(w.id) for w in work]
    finally:
        await engine.dispose()


def _queue_run(db: psycopg.Connection[Any], project: str, seconds_ago: int) -> str:
    inserted = db.execute(
        "INSERT INTO sync_runs (project_path, created_at) "
        "VALUES (%s, now() - make_interval(secs => %s)) RETURNING id",
        (project, seconds_ago),
    ).fetchone()
    assert inserted is not None
    return str(inserted[0])


def test_a_projects_sync_runs_are_claimed_in_the_order_they_were_requested(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    first = _queue_run(db, "/p/shop", seconds_ago=30)
    second = _queue_run(db, "/p/shop", seconds_ago=20)
    other = _queue_run(db, "/p/blog", seconds_ago=10)

    # Worker a takes the oldest run of each project; worker b must not start the newer one.
    assert sorted(asyncio.run(_claim_runs(database_url, "a"))) == sorted([first, other])
    assert asyncio.run(_claim_runs(database_url, "b")) == []

    db.execute("UPDATE sync_runs SET status = 'running' WHERE id = %s", (first,))
    assert asyncio.run(_claim_runs(database_url, "b")) == []
    # Failed and put back in the queue for a retry: it still comes first.
    db.execute(
        "UPDATE sync_runs SET status = 'queued', locked_by = NULL, locked_until = NULL, "
        "next_attempt_at = now() + interval '1 hour' WHERE id = %s",
        (first,),
    )
    assert asyncio.run(_claim_runs(database_url, "b")) == []

    db.execute("UPDATE sync_runs SET status = 'done' WHERE id = %s", (first,))
    assert asyncio.run(_claim_runs(database_url, "b")) == [second]


def test_a_run_that_failed_for_good_does_not_hold_back_the_next(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    failed = _queue_run(db, "/p/shop", seconds_ago=30)
    db.execute("UPDATE sync_runs SET status = 'failed' WHERE id = %s", (failed,))
    later = _queue_run(db, "/p/shop", seconds_ago=20)

    assert asyncio.run(_claim_runs(database_url, "a")) == [later]
