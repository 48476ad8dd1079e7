"""A server's delay (a 429's `Retry-After`, a RetryInfo's `retryDelay`) is honoured only up to
`MAX_RETRY_AFTER_SECONDS`, and one that is not a finite number is not honoured at all: through
the real google-genai client and the fake server, into the real database."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
from structlog.testing import capture_logs

from app.llm import generation
from app.llm.generation import MAX_RETRY_AFTER_SECONDS
from app.logs import configure_logging
from app.sync import cancels
from app.worker import jobs
from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.worker.builders import make_observation, make_session, rows, worker_on
from tests.worker.test_cancel_sweep import pending_cancel, with_key
from tests.worker.test_embedding_outage import add_memory_row
from tests.worker.test_embedding_outage import gemini_settings as embedding_settings


def quota(*, header: str | None = None, retry_delay: str | None = None) -> FakeResponse:
    """A 429 asking its delay in a `Retry-After` header or a google.rpc.RetryInfo detail."""
    error: dict[str, Any] = {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}
    if retry_delay is not None:
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
        ]
    return FakeResponse(429, {"error": error}, {"Retry-After": header} if header else {})


NOT_FINITE = {
    "header inf": quota(header="inf"),
    "header nan": quota(header="nan"),
    # 400 digits: float() makes it inf
    "retryDelay past a float": quota(retry_delay="9" * 400 + "s"),
}
PAST_THE_CAP = {
    "header 1e9": quota(header="1e9"),
    "retryDelay 999999999s": quota(retry_delay="999999999s"),
}


def compress_settings(url: str, tmp_path: Path) -> Any:
    return make_settings(
        home=tmp_path / "home",
        gemini_api_key="k",
        gemini_base_url=url,
        worker_backoff_base_seconds=2.0,
        worker_backoff_max_seconds=2.0,
        # The gate's spacing (60 s / the rate) is not what these tests read: at the default 60 a
        # minute, each second call waited 1 s for its slot (~1 s of each two-call test).
        gemini_requests_per_minute=100_000,
    )


def due_in(db: psycopg.Connection[Any]) -> dict[str, tuple[str, float]]:
    """Per observation: its status and the seconds until it is due."""
    found = rows(
        db,
        "SELECT id, status, extract(epoch FROM next_attempt_at - now())::float AS due "
        "FROM observations",
    )
    return {r["id"]: (r["status"], r["due"]) for r in found}


@pytest.mark.parametrize("answer", NOT_FINITE.values(), ids=NOT_FINITE.keys())
def test_a_delay_that_is_not_a_finite_number_is_not_a_pause(
    answer: FakeResponse, db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    # `Retry-After: inf` paused the gate for ever, and every compression after it failed in
    # release_claim (`DataError: interval out of range`) until its row ended `failed`.
    make_session(db)
    make_observation(db, "o1")
    make_observation(db, "o2")
    with fake_gemini() as fake:
        fake.queue(":generateContent", answer)
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Learned: x")))

        async def two_steps() -> float:
            async with worker_on(compress_settings(fake.url, tmp_path), database_url) as worker:
                assert await worker.step()  # the 429
                paused = worker.ctx.gate.paused_for()
                assert await worker.step()  # the other row, asked at once
                return paused

        paused = asyncio.run(two_steps())

    assert paused == 0
    (waiting, compressed) = sorted(due_in(db).values())
    assert waiting[0] == "captured"
    assert waiting[1] <= 2.5  # its own backoff (jittered: it may be due already)
    assert compressed[0] == "compressed"


@pytest.mark.parametrize("answer", PAST_THE_CAP.values(), ids=PAST_THE_CAP.keys())
def test_a_delay_past_the_cap_pauses_the_cap(
    answer: FakeResponse,
    db: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `Retry-After: 1e9` postponed every row 11,574 days: they waited until 2058.
    # A logger keeps the configuration of its first use (an in-process CLI test's level).
    configure_logging("info")
    monkeypatch.setattr(generation, "log", structlog.get_logger(generation.__name__))
    make_session(db)
    make_observation(db, "o1")
    make_observation(db, "o2")
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: answer)

        async def two_steps() -> float:
            async with worker_on(compress_settings(fake.url, tmp_path), database_url) as worker:
                assert await worker.step()  # the 429
                assert await worker.step()  # the other row: postponed without a call
                return worker.ctx.gate.paused_for()

        with capture_logs() as logged:
            paused = asyncio.run(two_steps())
        assert len(fake.calls(":generateContent")) == 1

    assert MAX_RETRY_AFTER_SECONDS - 60 < paused <= MAX_RETRY_AFTER_SECONDS
    for status, due in due_in(db).values():
        assert status == "captured"
        assert MAX_RETRY_AFTER_SECONDS - 60 < due <= MAX_RETRY_AFTER_SECONDS
    capped = [e for e in logged if e["event"] == "gemini.retry_after_capped"]
    assert [(e["log_level"], e["seconds"]) for e in capped] == [
        ("warning", MAX_RETRY_AFTER_SECONDS)
    ]


def test_a_cancels_delay_past_the_cap_holds_the_sweep_for_the_cap(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    pending_cancel(db, "batches/job-1")
    with fake_gemini() as fake:
        fake.on(":cancel", lambda _r: quota(header="1e9"))

        async def one_sweep() -> cancels.Swept:
            async with worker_on(with_key(fake, tmp_path), database_url) as worker:
                return await jobs.sweep_cancels(worker.ctx)

        swept = asyncio.run(one_sweep())

    assert MAX_RETRY_AFTER_SECONDS - 60 < swept.next_in(1.0) <= MAX_RETRY_AFTER_SECONDS


@pytest.mark.parametrize("header", ["1e9", "inf"])
def test_an_embeddings_delay_is_bounded_too(
    header: str, db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    # The rows wait out a long delay under a lease: `now() + 1e9 s`, or an interval out of range.
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", lambda _r: quota(header=header))
        add_memory_row(db, "written during the quota window")

        async def one_batch() -> None:
            async with worker_on(embedding_settings(fake, tmp_path), database_url) as worker:
                await jobs.embed_batch(worker.ctx)

        asyncio.run(one_batch())

    ((attempts, lease),) = db.execute(
        "SELECT embed_attempts, extract(epoch FROM embed_claimed_until - now())::float "
        "FROM memory_chunks"
    ).fetchall()
    if header == "inf":  # no delay asked: an ordinary failed attempt, no lease
        assert (attempts, lease) == (1, None)
    else:
        assert attempts == 0
        assert MAX_RETRY_AFTER_SECONDS - 60 < lease <= MAX_RETRY_AFTER_SECONDS
