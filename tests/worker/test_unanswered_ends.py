"""Ends and checkpoints around calls still waiting for a result (the review of pending13): an end
after a checkpoint is a real end, and a call recorded after the end waits for the timeout."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.worker import claims, results
from tests.conftest import make_settings
from tests.worker.builders import drain, row
from tests.worker.test_unanswered import NO_GRACE, _call, _end, _result, _running_tests, _start


@pytest.mark.parametrize("summarised_first", [True, False])
def test_an_end_after_a_checkpoint_sets_ended_at_and_gives_up(
    client: TestClient, db: psycopg.Connection[Any], database_url: str, summarised_first: bool
) -> None:
    """A checkpoint while c2 runs; then the agent is killed and the session ended, after the
    checkpoint's summary (nothing new since) or before the worker took the checkpoint."""
    _running_tests(client)
    assert client.post("/api/summarize", json={"sessionId": "s1"}).status_code == 202
    if summarised_first:
        drain(NO_GRACE, database_url)
        assert row(db, "SELECT status FROM sessions")["status"] == "summarized"

    _end(client, "s1")
    drain(NO_GRACE, database_url)

    session = client.get("/api/sessions/s1").json()
    c2 = row(db, "SELECT status FROM observations WHERE id = 'c2'")["status"]
    assert (session["endedAt"] is not None, c2) == (True, "compressed")


def test_a_call_recorded_after_the_summary_waits_the_timeout_not_the_grace(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """docs/worker.md: 'for a call recorded after its session's summary, the periodic upkeep ...
    gives up on any call pending for AGMEM_WORKER_RESULT_TIMEOUT_SECONDS'."""
    _start(client, "s1")
    _call(client, "s1", "c1", "npm ci")
    assert _result(client, "s1", "added 312 packages", "c1")[0] == 200
    _end(client, "s1")
    drain(make_settings(), database_url)
    assert row(db, "SELECT status FROM sessions")["status"] == "summarized"
    # The agent goes on in the same session: a long test run starts, a quick command answers.
    _call(client, "s1", "long", "pytest tests/  # runs 10 minutes")
    _call(client, "s1", "quick", "git status")
    assert _result(client, "s1", "clean", "quick")[0] == 200
    db.execute("UPDATE observations SET created_at = now() - interval '1 minute' WHERE id='long'")
    db.execute("UPDATE sessions SET ended_at = now() - interval '10 minutes'")  # ended earlier
    drain(make_settings(), database_url)  # default grace 30 s, timeout 6 h

    long = row(db, "SELECT status FROM observations WHERE id = 'long'")["status"]
    assert long == "pending"  # 1 minute old, not 6 hours


def _sql(statement: Any) -> str:
    """A SQLAlchemy text() statement in psycopg's parameter style."""
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", str(statement))


def test_a_checkpoint_summary_ended_meanwhile_loses_to_the_ends_on_the_same_worker(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # The end takes the checkpoint's claim; a worker's lanes share its id, so when another lane
    # of the same worker claimed the end, the checkpoint's stale summary was stored and the
    # end's refused, for good (the review of fix13c).
    _running_tests(client)
    db.execute("UPDATE observations SET status = 'compressed', compressed_data = 'npm ci ok'")
    assert client.post("/api/summarize", json={"sessionId": "s1"}).status_code == 202
    lane = {"worker": "W", "lease": 300, "limit": 1, "max_attempts": 5}
    checkpoint = db.execute(_sql(claims._CLAIM_SESSIONS), lane).fetchall()
    assert [(r[0], r[-1]) for r in checkpoint] == [("s1", False)]
    _end(client, "s1")
    end = db.execute(_sql(claims._CLAIM_SESSIONS), lane).fetchall()
    assert [(r[0], r[-1]) for r in end] == [("s1", True)]

    def finish(summary: str, ended: bool) -> int:
        values = {"id": "s1", "worker": "W", "summary": summary, "generated_by": "x"}
        written = db.execute(
            _sql(results._FINISH_SESSION), values | {"error": None, "ended": ended}
        )
        return len(written.fetchall())

    assert finish("CHECKPOINT: npm ci", ended=False) == 0
    assert finish("END: npm ci, the tests ran", ended=True) == 1
    assert row(db, "SELECT summary FROM sessions")["summary"] == "END: npm ci, the tests ran"
