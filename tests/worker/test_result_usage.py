"""Gemini's usage for a result whose write failed: paid once, counted once."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from app.worker import jobs, loop
from tests.fakes.gemini import FakeResponse, fake_gemini, text_answer
from tests.llm.test_compress_gemini import gemini_settings
from tests.worker.builders import (
    log_to_stderr,
    make_observation,
    make_session,
    row,
    worker_on,
)

SUMMARY = "Fixed the token check in src/o1.ts."


def test_a_summary_whose_write_deadlocks_keeps_the_usage_it_paid_for(
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The usage was written in the summary's transaction: a deadlock rolled both back, the retry
    # paid Gemini again, and `llm_usage` (the durable daily budget) never saw the first call.
    log_to_stderr(monkeypatch, loop, jobs)
    make_session(db, status="ending")
    make_observation(db, "o1", status="compressed")
    db.execute("UPDATE observations SET compressed_data = 'Read src/o1.ts: validateToken'")
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
