"""What a job's failure leaves in the log and on its row: the database's reason, never the
statement's parameters (the user's text) or its SQL."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from app.worker import jobs, loop
from tests.conftest import make_settings
from tests.worker.builders import (
    log_to_stderr,
    make_observation,
    make_session,
    row,
    worker_on,
)

# In the observation's text, and so in the index row the job inserts.
MARKER = "zebrafish-ledger-4471"


def test_a_failed_write_leaves_its_reason_not_the_users_text(
    db: psycopg.Connection[Any],
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # SQLAlchemy's error text holds the statement and its parameters: an index row's content
    # (the observation's compressed text, a summary, a file's chunk) went into `last_error`
    # (served as `lastError`) and into each `worker.attempt_failed` and traceback, 1-2 KB a line.
    log_to_stderr(monkeypatch, loop, jobs)
    make_session(db)
    make_observation(db, "o1", result=f"the ledger is {MARKER}\n" * 3)
    db.execute(
        "CREATE FUNCTION refuse_chunk() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'index rows refused for this test'; END $$"
    )
    db.execute(
        "CREATE TRIGGER refuse_chunk BEFORE INSERT ON memory_chunks "
        "FOR EACH ROW EXECUTE FUNCTION refuse_chunk()"
    )

    async def one_job() -> None:
        async with worker_on(make_settings(database_url=database_url), database_url) as worker:
            assert await worker.step()

    try:
        asyncio.run(one_job())
    finally:
        db.execute("DROP TRIGGER refuse_chunk ON memory_chunks")
        db.execute("DROP FUNCTION refuse_chunk()")

    stored = row(db, "SELECT status, attempts, last_error FROM observations")
    assert (stored["status"], stored["attempts"]) == ("captured", 1)
    # psycopg's class, not SQLAlchemy's wrapper (`ProgrammingError` names only the family).
    assert stored["last_error"] == "RaiseException: index rows refused for this test"
    logged = capsys.readouterr().err
    assert "worker.attempt_failed" in logged
    assert "index rows refused for this test" in logged
    assert MARKER not in logged
    failures = [line for line in logged.splitlines() if "worker.attempt_failed" in line]
    assert len(failures) == 1
    assert "INSERT INTO" not in failures[0]
