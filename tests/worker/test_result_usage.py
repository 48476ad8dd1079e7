"""Gemini's usage for a result whose write failed: paid once, counted once."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import exc as sa_exc

from app.worker import jobs, loop
from tests.fakes.gemini import FakeResponse, RecordedRequest, fake_gemini, text_answer
from tests.llm.test_compress_gemini import ANSWER, gemini_settings
from tests.worker.builders import (
    log_to_stderr,
    make_observation,
    make_session,
    row,
    worker_on,
)

SUMMARY = "Fixed the token check in src/o1.ts."


def _session_to_summarize(db: psycopg.Connection[Any]) -> None:
    """An ended session, its one call compressed: its summary is the next job."""
    make_session(db, status="ending")
    make_observation(db, "o1", status="compressed")
    db.execute("UPDATE observations SET compressed_data = 'Read src/o1.ts: validateToken'")


def test_a_summary_whose_write_deadlocks_keeps_the_usage_it_paid_for(
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The usage was written in the summary's transaction: a deadlock rolled both back, the retry
    # paid Gemini again, and `llm_usage` (the durable daily budget) never saw the first call.
    log_to_stderr(monkeypatch, loop, jobs)
    _session_to_summarize(db)
    db.execute(
        "CREATE FUNCTION deadlock_summary() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'deadlock for this test' USING ERRCODE = 'deadlock_detected';"
        " END $$"
    )
    # Only the summary's write: the failed attempt's record (same row) must go through.
    db.execute(
        "CREATE TRIGGER deadlock_summary BEFORE UPDATE ON sessions FOR EACH ROW "
        "WHEN (NEW.summary IS DISTINCT FROM OLD.summary) EXECUTE FUNCTION deadlock_summary()"
    )

    async def one_job(fake_url: str) -> None:
        async with worker_on(gemini_settings(fake_url), database_url) as worker:
            assert await worker.step()

    try:
        with fake_gemini() as fake:
            fake.on(":generateContent", lambda _request: FakeResponse(body=text_answer(SUMMARY)))
            asyncio.run(one_job(fake.url))
            calls = len(fake.calls(":generateContent"))
    finally:
        db.execute("DROP TRIGGER deadlock_summary ON sessions")
        db.execute("DROP FUNCTION deadlock_summary()")

    assert calls == 1
    stored = row(db, "SELECT status, summary, attempts, last_error FROM sessions")
    assert (stored["status"], stored["summary"], stored["attempts"]) == ("ending", None, 1)
    assert "deadlock for this test" in stored["last_error"]
    usage = row(
        db,
        "SELECT sum(requests) AS calls, sum(input_tokens) AS input,"
        " sum(output_tokens) AS output FROM llm_usage",
    )
    assert usage["calls"] == 1
    assert usage["input"] > 0
    assert usage["output"] > 0
    assert "worker.attempt_failed" in capsys.readouterr().err


def _lose_a_commit_reply_once(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Once the returned event is set (as Gemini answers), the job's next transaction commits
    and its reply is lost: the database's loss, raised after the commit went through."""
    answered = threading.Event()
    lost = threading.Event()
    real_transaction = jobs.transaction

    @contextlib.asynccontextmanager
    async def reply_lost_once(sessionmaker: Any) -> AsyncIterator[Any]:
        async with real_transaction(sessionmaker) as session:
            yield session
        if answered.is_set() and not lost.is_set():
            lost.set()
            raise sa_exc.OperationalError(
                "COMMIT", {}, psycopg.OperationalError("server closed the connection unexpectedly")
            )

    monkeypatch.setattr(jobs, "transaction", reply_lost_once)
    return answered


def _answering(answered: threading.Event, text: str) -> Any:
    def answer(_request: RecordedRequest) -> FakeResponse:
        answered.set()
        return FakeResponse(body=text_answer(text))

    return answer


def _one_job_answered(answered: threading.Event, text: str, database_url: str) -> int:
    """One job, Gemini answering `text` (and setting `answered`); Gemini's calls."""

    async def one_job(fake_url: str) -> None:
        async with worker_on(gemini_settings(fake_url), database_url) as worker:
            assert await worker.step()

    with fake_gemini() as fake:
        fake.on(":generateContent", _answering(answered, text))
        asyncio.run(one_job(fake.url))
        return len(fake.calls(":generateContent"))


def test_a_compression_whose_commit_reply_is_lost_is_stored_and_paid_once(
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The write is retried when the database's loss cuts it short; when the loss came after the
    # commit, the retry found its claim gone: it wrote the usage a second time and logged
    # `claim_lost` for a result that was stored.
    log_to_stderr(monkeypatch, loop, jobs)
    make_session(db)
    make_observation(db, "o1")
    answered = _lose_a_commit_reply_once(monkeypatch)
    calls = _one_job_answered(answered, ANSWER, database_url)

    assert calls == 1
    stored = row(db, "SELECT status, locked_by, generated_by FROM observations")
    assert (stored["status"], stored["locked_by"]) == ("compressed", None)
    assert stored["generated_by"].startswith("gemini:")
    usage = row(db, "SELECT sum(requests) AS calls, sum(input_tokens) AS tokens FROM llm_usage")
    assert (usage["calls"], usage["tokens"]) == (1, 10)
    logged = capsys.readouterr().err
    assert "observation.compressed" in logged
    assert "observation.claim_lost" not in logged


def test_a_summary_whose_commit_reply_is_lost_is_stored_and_paid_once(
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log_to_stderr(monkeypatch, loop, jobs)
    _session_to_summarize(db)
    answered = _lose_a_commit_reply_once(monkeypatch)
    calls = _one_job_answered(answered, SUMMARY, database_url)

    assert calls == 1
    stored = row(db, "SELECT status, locked_by, summary FROM sessions")
    assert (stored["status"], stored["locked_by"], stored["summary"]) == (
        "summarized",
        None,
        SUMMARY,
    )
    usage = row(db, "SELECT sum(requests) AS calls FROM llm_usage")
    assert usage["calls"] == 1
    logged = capsys.readouterr().err
    assert "session.summarized" in logged
    assert "session.claim_lost" not in logged
