"""The worker's sweep of cancels still pending at Gemini: a project never synced again does not
keep its superseded jobs' cancels pending for ever. Through the real google-genai client and the
fake server; rows straight into the real database."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.config import Settings
from app.llm.embeddings import local_embedder
from app.sync import cancels
from app.sync.indexer import SyncRequest, sync_project
from app.worker import jobs
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, fake_gemini, text_answer
from tests.sync.helpers import make_project
from tests.worker.builders import make_observation, make_session, row, run_until, worker_on

OLD_MODEL = "gemini:gemini-embedding-001:768"


def pending_cancel(
    db: psycopg.Connection[Any],
    job: str,
    *,
    project: str = "/home/dev/left",
    hours_old: float = 1,
    tried_minutes_ago: float = 60,
) -> None:
    """A job a model switch closed, its cancel at Gemini still to do, last tried a while ago."""
    db.execute(
        "INSERT INTO embedding_batches (project_path, model, provider_job, hashes, status, "
        "last_error, cancel_status, cancel_requested_at, created_at, updated_at) VALUES "
        "(%s, %s, %s, '[]', 'failed', 'superseded: the embedding model is now local', 'pending', "
        "now() - make_interval(secs => %s), now() - make_interval(secs => %s), "
        "now() - make_interval(secs => %s))",
        (project, OLD_MODEL, job, hours_old * 3600, hours_old * 3600, tried_minutes_ago * 60),
    )


def states(db: psycopg.Connection[Any]) -> dict[str, tuple[Any, ...]]:
    """Per job: (cancel_status, settled, cancel_error)."""
    found = db.execute(
        "SELECT provider_job, cancel_status, cancel_settled_at IS NOT NULL, cancel_error "
        "FROM embedding_batches"
    ).fetchall()
    return {job: tuple(rest) for job, *rest in found}


def with_key(fake: FakeGemini, tmp_path: Path) -> Settings:
    return make_settings(home=tmp_path / "home", gemini_api_key="k", gemini_base_url=fake.url)


def sweep(settings: Settings, database_url: str, times: int = 1) -> list[int]:
    """`times` sweeps at once, each by a worker of its own (as separate processes would)."""

    async def one() -> int:
        async with worker_on(settings, database_url) as worker:
            return (await jobs.sweep_cancels(worker.ctx)).taken

    async def all_at_once() -> list[int]:
        return list(await asyncio.gather(*(one() for _ in range(times))))

    return asyncio.run(all_at_once())


def test_a_running_worker_cancels_what_a_project_never_synced_again_left_pending(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    pending_cancel(db, "batches/job-1")
    with fake_gemini() as fake:
        fake.on("batches/job-1:cancel", lambda _r: FakeResponse(200, {}))

        run_until(
            with_key(fake, tmp_path),
            database_url,
            lambda: states(db)["batches/job-1"][0] == "cancelled",
            timeout=20,
        )

        assert len(fake.calls(":cancel")) == 1
    assert states(db) == {"batches/job-1": ("cancelled", True, None)}


def test_sweeps_at_once_ask_gemini_once_per_job(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    jobs_ = [f"batches/job-{n}" for n in range(3)]
    for job in jobs_:
        pending_cancel(db, job)
    with fake_gemini() as fake:
        # Slow enough that every sweep reads the table while the first one's cancels are asked.
        fake.on(":cancel", lambda _r: FakeResponse(200, {}, delay_s=1.0))

        swept = sweep(with_key(fake, tmp_path), database_url, times=3)

        asked = sorted(c.path.split("?")[0].rsplit("/", 1)[1] for c in fake.calls(":cancel"))
    assert asked == sorted(f"{job.split('/')[1]}:cancel" for job in jobs_)
    # Each job taken by one sweep: how they share them depends on when each take's SKIP LOCKED
    # read runs (under load one sweep can lock a row before another's read reaches it: [0, 1, 2]).
    assert sum(swept) == 3
    assert {s[0] for s in states(db).values()} == {"cancelled"}


def test_a_sweep_asks_only_due_cancels_and_a_bounded_number_of_them(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    pending_cancel(db, "batches/recent", tried_minutes_ago=3)  # retried 10 min after its try
    for n in range(cancels.SWEEP_LIMIT + 2):
        pending_cancel(db, f"batches/due-{n:02d}")
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: FakeResponse(200, {}))
        settings = with_key(fake, tmp_path)

        first = sweep(settings, database_url)
        second = sweep(settings, database_url)
        third = sweep(settings, database_url)

        assert len(fake.calls(":cancel")) == cancels.SWEEP_LIMIT + 2
    assert (first, second, third) == ([cancels.SWEEP_LIMIT], [2], [0])
    assert states(db).pop("batches/recent") == ("pending", False, None)
    assert {s[0] for s in states(db).values()} == {"pending", "cancelled"}


def test_without_a_key_a_sweep_asks_nothing_and_settles_only_the_expired(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    pending_cancel(db, "batches/old", hours_old=49)
    pending_cancel(db, "batches/young")
    before = db.execute(
        "SELECT updated_at FROM embedding_batches WHERE provider_job = 'batches/young'"
    ).fetchone()

    sweep(make_settings(home=tmp_path / "home"), database_url)

    assert states(db)["batches/old"][:2] == ("expired", True)
    assert states(db)["batches/young"] == ("pending", False, None)
    after = db.execute(
        "SELECT updated_at FROM embedding_batches WHERE provider_job = 'batches/young'"
    ).fetchone()
    assert after == before  # not taken: a worker with a key tries it at once


def test_a_sync_while_the_sweep_asks_does_not_ask_again(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    pending_cancel(db, "batches/job-1", project=str(project))
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: FakeResponse(200, {}, delay_s=1.5))
        settings = with_key(fake, tmp_path)

        async def both() -> None:
            async with worker_on(settings, database_url) as worker:
                swept = asyncio.create_task(jobs.sweep_cancels(worker.ctx))
                while not fake.calls(":cancel"):
                    await asyncio.sleep(0.01)
                request = SyncRequest(project_path=str(project))
                await sync_project(worker.ctx.sessionmaker, settings, local_embedder(), request)
                await swept

        asyncio.run(both())

        assert len(fake.calls(":cancel")) == 1
    assert states(db) == {"batches/job-1": ("cancelled", True, None)}


def test_a_sweep_while_a_sync_asks_does_not_ask_again(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The sync's close statement takes the cancels it asks as the sweep does: with the sync
    # first, nothing else showed that it does (the sweep going first had taken the row already).
    project = make_project(tmp_path / "proj")
    pending_cancel(db, "batches/job-1", project=str(project))
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: FakeResponse(200, {}, delay_s=1.5))
        settings = with_key(fake, tmp_path)

        async def both() -> int:
            async with worker_on(settings, database_url) as worker:
                request = SyncRequest(project_path=str(project))
                synced = asyncio.create_task(
                    sync_project(worker.ctx.sessionmaker, settings, local_embedder(), request)
                )
                while not fake.calls(":cancel"):
                    await asyncio.sleep(0.01)
                swept = await jobs.sweep_cancels(worker.ctx)
                await synced
                return swept.taken

        assert asyncio.run(both()) == 0
        assert len(fake.calls(":cancel")) == 1
    assert states(db) == {"batches/job-1": ("cancelled", True, None)}


@pytest.mark.parametrize("answer", [503, 400])
def test_a_failed_sweep_cancel_waits_its_10_minutes(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, answer: int
) -> None:
    pending_cancel(db, "batches/job-1")
    status = "UNAVAILABLE" if answer == 503 else "INVALID_ARGUMENT"
    with fake_gemini() as fake:
        fake.on(
            ":cancel",
            lambda _r: FakeResponse(
                answer, {"error": {"code": answer, "message": "no", "status": status}}
            ),
        )
        settings = with_key(fake, tmp_path)

        sweep(settings, database_url)
        sweep(settings, database_url)

        assert len(fake.calls(":cancel")) == 1
    state = states(db)["batches/job-1"]
    assert state[:2] == ("pending", False)
    assert f"{answer} {status}" in state[2]


def test_a_full_sweep_that_failed_waits_its_interval_before_the_next(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A full pass is followed by another at once, for a backlog; not when Gemini refused: against
    # a 429 a backlog of 1,000 was asked in 6.7 s, spending the quota embeddings use too.
    for number in range(cancels.SWEEP_LIMIT + 5):
        pending_cancel(db, f"batches/job-{number}")
    quota = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: FakeResponse(429, quota))
        settings = with_key(fake, tmp_path).model_copy(
            update={"worker_purge_interval_seconds": 600}
        )
        first_pass_seen: list[float] = []

        def a_while_after_the_first_pass() -> bool:
            if not first_pass_seen and len(fake.calls(":cancel")) >= cancels.SWEEP_LIMIT:
                first_pass_seen.append(time.monotonic())
            return bool(first_pass_seen) and time.monotonic() - first_pass_seen[0] > 1.5

        run_until(settings, database_url, a_while_after_the_first_pass, timeout=30)

        assert len(fake.calls(":cancel")) == cancels.SWEEP_LIMIT
    pending = [state for state in states(db).values() if state[0] == "pending"]
    assert len(pending) == cancels.SWEEP_LIMIT + 5


def quota_exhausted(retry_after: int) -> FakeResponse:
    body = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
    return FakeResponse(429, body, headers={"Retry-After": str(retry_after)})


def test_a_429_on_a_sweeps_cancel_pauses_the_processs_other_gemini_calls(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The sweep kept a 429's Retry-After to itself: the process's compressions went on asking
    # Gemini, each refused and its attempt spent, for the minute Gemini had asked for.
    pending_cancel(db, "batches/job-1")
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: quota_exhausted(60))
        fake.on(":generateContent", lambda _r: FakeResponse(200, text_answer("Learned: x")))

        async def sweep_then_compress() -> cancels.Swept:
            async with worker_on(with_key(fake, tmp_path), database_url) as worker:
                swept = await jobs.sweep_cancels(worker.ctx)
                assert await worker.step()  # the observation's turn
                return swept

        swept = asyncio.run(sweep_then_compress())

        assert fake.calls(":generateContent") == []
    assert (swept.taken, swept.failed) == (1, 1)
    assert 30 < swept.next_in(1.0) <= 60  # the sweep too waits out the minute
    compressed = row(db, "SELECT status, attempts FROM observations WHERE id = 'o1'")
    assert compressed == {"status": "captured", "attempts": 0}  # postponed, no attempt spent


def test_a_sweep_asks_nothing_while_the_gate_holds_a_pause(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A compression's 429 paused the process's Gemini calls; the sweep asked its cancels anyway,
    # into the same quota, and each one's next try moved 10 minutes away.
    pending_cancel(db, "batches/job-1")
    pending_cancel(db, "batches/old", hours_old=49)
    taken_at = row(
        db, "SELECT updated_at FROM embedding_batches WHERE provider_job = %s", "batches/job-1"
    )
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: FakeResponse(200, {}))

        async def paused_sweep() -> cancels.Swept:
            async with worker_on(with_key(fake, tmp_path), database_url) as worker:
                worker.ctx.gate.pause(30)  # a compression's 429, Retry-After: 30
                return await jobs.sweep_cancels(worker.ctx)

        swept = asyncio.run(paused_sweep())

        assert fake.calls(":cancel") == []
    assert 0 < swept.next_in(600.0) <= 30  # back when the pause ends, not the interval
    assert states(db)["batches/job-1"] == ("pending", False, None)
    assert (
        row(db, "SELECT updated_at FROM embedding_batches WHERE provider_job = %s", "batches/job-1")
        == taken_at
    )  # not taken: asked as soon as the pause ends
    assert states(db)["batches/old"][:2] == ("expired", True)  # settled without a call


def test_a_running_worker_sweeps_again_only_after_a_cancels_retry_after(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    for number in range(cancels.SWEEP_LIMIT + 5):
        pending_cancel(db, f"batches/job-{number}")
    asked_at: list[float] = []

    def refused(_request: Any) -> FakeResponse:
        asked_at.append(time.monotonic())
        return quota_exhausted(3)

    with fake_gemini() as fake:
        fake.on(":cancel", refused)
        settings = with_key(fake, tmp_path).model_copy(
            update={"worker_purge_interval_seconds": 0.2}
        )

        run_until(settings, database_url, lambda: len(asked_at) > cancels.SWEEP_LIMIT, timeout=30)

    first_pass, next_pass = asked_at[: cancels.SWEEP_LIMIT], asked_at[cancels.SWEEP_LIMIT]
    assert next_pass - max(first_pass) >= 2.9  # Retry-After 3 s, not the 0.2 s interval


def test_a_sweep_waiting_on_gemini_holds_no_lane(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, monkeypatch: Any
) -> None:
    # The sweep's cancels are its own: a lane's compression, one Gemini call at a time in this
    # process, does not wait for a cancel Gemini is slow to answer. The pass's bound is lifted,
    # so that only the cancel's own timeout (10 s) could end a wait on it.
    monkeypatch.setattr(cancels, "CANCEL_DEADLINE_SECONDS", 60.0)
    pending_cancel(db, "batches/job-1")
    make_session(db)
    make_observation(db, "o1")
    release = threading.Event()
    cancel_asked: list[float] = []
    compressed_at: list[float] = []

    def held(_request: Any) -> FakeResponse:
        cancel_asked.append(time.monotonic())
        release.wait(30)
        return FakeResponse(200, {})

    with fake_gemini() as fake:
        fake.on(":cancel", held)
        fake.on(":generateContent", lambda _r: FakeResponse(200, text_answer("Learned: x")))
        settings = with_key(fake, tmp_path).model_copy(update={"gemini_max_concurrent": 1})

        def compressed_while_a_cancel_was_asked() -> bool:
            status = row(db, "SELECT status FROM observations WHERE id = 'o1'")["status"]
            if status == "compressed" and not compressed_at:
                compressed_at.append(time.monotonic())
            return bool(compressed_at and cancel_asked)

        try:
            run_until(settings, database_url, compressed_while_a_cancel_was_asked, timeout=30)
        finally:
            release.set()

    assert compressed_at[0] - cancel_asked[0] < 10  # not after the cancel's own timeout


def test_a_closed_worker_has_closed_both_of_its_clients_transports(
    database_url: str, tmp_path: Path
) -> None:
    # Worker.close closed only the async one (`client.aio`); google-genai keeps a sync httpx
    # client beside it, left open until the garbage collector came by.
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(200, text_answer("Learned: x")))

        async def closed_client() -> Any:
            async with worker_on(with_key(fake, tmp_path), database_url) as worker:
                return worker.ctx.client

        client = asyncio.run(closed_client())

        with pytest.raises(RuntimeError, match="closed"):
            client.models.generate_content(model="gemini-2.5-flash", contents="x")

        async def asked_async() -> None:
            await client.aio.models.generate_content(model="gemini-2.5-flash", contents="x")

        with pytest.raises(RuntimeError, match="closed"):
            asyncio.run(asked_async())
        assert fake.calls(":generateContent") == []
