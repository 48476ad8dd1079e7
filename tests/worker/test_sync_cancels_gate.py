"""A sync the worker runs asks its project's Batch cancels at the same Gemini, in the same quota,
as the worker's compressions: it holds them while a 429's pause runs, and a 429 on one pauses
the worker's other calls. Through the real google-genai client and the fake server, into the
real database."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg

from app.config import Settings
from app.worker import jobs
from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.sync.helpers import make_project
from tests.worker.builders import make_observation, make_session, row, worker_on
from tests.worker.test_cancel_sweep import pending_cancel, states, with_key
from tests.worker.test_retry_after_bounds import quota

JOB = "batches/job-1"


def queue_sync(db: psycopg.Connection[Any], tmp_path: Path) -> str:
    """A project with a job whose cancel is due, and a sync run of it queued for the worker."""
    project = str(make_project(tmp_path / "shop"))
    pending_cancel(db, JOB, project=project)
    db.execute(
        "INSERT INTO sync_runs (project_path, memory_dir) VALUES (%s, %s)", (project, project)
    )
    return project


def test_a_worker_run_sync_asks_no_cancel_while_a_429s_pause_runs(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    # The sync asked its cancels into the quota a compression's 429 had just said was spent.
    queue_sync(db, tmp_path)
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: quota(header="300"))
        fake.on(f"{JOB}:cancel", lambda _r: FakeResponse(200, {}))

        async def compress_then_sync(settings: Settings) -> None:
            async with worker_on(settings, database_url) as worker:
                assert await worker.step()  # the 429: a 300 s pause
                assert await worker.step()  # the sync run
                assert worker.ctx.gate.paused_for() > 200

        asyncio.run(compress_then_sync(with_key(fake, tmp_path)))
        cancels_asked = len(fake.calls(":cancel"))

    assert row(db, "SELECT status FROM sync_runs")["status"] == "done"
    assert cancels_asked == 0
    ((status, settled, error),) = states(db).values()
    assert (status, settled) == ("pending", False)
    assert "pause" in error


def test_a_429_on_a_worker_run_syncs_cancel_pauses_the_workers_calls(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    # The cancel's 429 paused nothing: the next compression went into the spent quota at once.
    queue_sync(db, tmp_path)
    with fake_gemini() as fake:
        fake.on(f"{JOB}:cancel", lambda _r: quota(header="300"))

        async def sync_then_look(settings: Settings) -> float:
            async with worker_on(settings, database_url) as worker:
                assert await worker.step()  # the sync run, its cancel answered 429
                return worker.ctx.gate.paused_for()

        paused = asyncio.run(sync_then_look(with_key(fake, tmp_path)))
        cancels_asked = len(fake.calls(":cancel"))

    assert cancels_asked == 1
    assert 240 < paused <= 300
    ((status, _settled, error),) = states(db).values()
    assert status == "pending"
    assert "429" in error


def test_cancels_answered_429_pause_the_worker_but_never_open_its_breaker(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    # The breaker says whether generation works (a key, a model, Gemini reachable): opened by
    # a sweep's cancels answered 429, it would send every compression to the extractive text for
    # its cooldown, where the pause alone has them wait for Gemini.
    for n in range(6):  # more than the threshold of 5 failures in a row
        pending_cancel(db, f"batches/job-{n}")
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: quota(header="1"))
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Learned: x")))

        async def sweep_then_compress(settings: Settings) -> tuple[bool, float]:
            async with worker_on(settings, database_url) as worker:
                swept = await jobs.sweep_cancels(worker.ctx)
                assert (swept.taken, swept.failed) == (6, 6)
                opened, paused = worker.ctx.gate.breaker_open, worker.ctx.gate.paused_for()
                await asyncio.sleep(paused)  # the pause's end: the lane's call goes to Gemini
                assert await worker.step()
                return opened, paused

        opened, paused = asyncio.run(sweep_then_compress(with_key(fake, tmp_path)))

    assert not opened
    assert 0 < paused <= 1
    assert row(db, "SELECT generated_by FROM observations")["generated_by"] == "gemini:" + (
        make_settings().gemini_model
    )
