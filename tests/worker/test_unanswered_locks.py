"""The give-up's real statement against results sent at the same moment, each from a connection of
its own, paused at a chosen row by a third transaction holding that row's lock: the order in
which the give-up locks the calls decides which call a result sent by name may take."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.db.engine import transaction
from app.llm.summarize import SUMMARY_INSTRUCTIONS
from app.worker import claims, jobs, unanswered
from tests.conftest import libpq_url, make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, fake_gemini, text_answer
from tests.worker.builders import drain, row, rows, worker_on
from tests.worker.test_unanswered import (
    NO_GRACE,
    _call,
    _end,
    _result,
    _running_tests,
    _start,
    drain_while_held,
    wait_for_blocked_give_up,
)
from tests.worker.test_unanswered_ends import _sql

# What capture writes when a result by id comes (app/capture/queries.py, _APPLY_RESULT).
_APPLY_RESULT = (
    "UPDATE observations SET status = 'captured', result = to_jsonb('{result}'::text), "
    "result_at = now(), next_attempt_at = now() WHERE id = '{id}' AND status = 'pending'"
)
_C2_RESULT = _APPLY_RESULT.format(result="2 passed", id="c2")


# Both give-ups: at the session's summary (no grace left), and the upkeep's (no timeout left).
GIVE_UPS = {
    "in_session": (_sql(unanswered._GIVE_UP_IN_SESSION), {"id": "s1", "grace": 0}),
    "timed_out": (_sql(unanswered._GIVE_UP_TIMED_OUT), {"timeout": 0}),
}


def _three_calls_ended(client: TestClient, db: psycopg.Connection[Any]) -> None:
    """c1, c2, c3 of one function wait for their results; then the end. The rows are then laid
    out newest first in the table (as updates leave them), so that only the statement's own
    order, not the table's, can lock them oldest first."""
    _start(client, "s1")
    for call_id in ("c1", "c2", "c3"):
        _call(client, "s1", call_id, f"pytest -x tests/{call_id}")
    _end(client, "s1")
    for call_id in ("c3", "c2", "c1"):
        db.execute("UPDATE observations SET last_error = NULL WHERE id = %s", (call_id,))
    order = rows(db, "SELECT id FROM observations WHERE session_id = 's1' ORDER BY ctid")
    assert [r["id"] for r in order] == ["c3", "c2", "c1"]


@pytest.mark.parametrize("give_up_sql", GIVE_UPS)
def test_a_result_by_name_during_the_give_up_takes_the_newest_call(
    client: TestClient, db: psycopg.Connection[Any], database_url: str, give_up_sql: str
) -> None:
    """The give-up is paused at c2 (c2's result by id holds its row). A result of the same
    function sent by name then takes c3, the newest call: the give-up has locked only c1 so far.
    Locked newest first, it held c3 and the result took c1, an older call's place."""
    _three_calls_ended(client, db)
    with (
        psycopg.connect(libpq_url(database_url)) as result_tx,
        psycopg.connect(libpq_url(database_url)) as give_up_tx,
    ):
        result_tx.execute(_C2_RESULT)
        # An index scan of this small table reads the calls in order by itself (their index
        # entries point at each row's first place); a sequential scan, which the planner may
        # choose on other statistics, reads them where their latest versions lie.
        give_up_tx.execute("SET enable_indexscan = off; SET enable_bitmapscan = off")

        worker = threading.Thread(target=give_up_tx.execute, args=GIVE_UPS[give_up_sql])
        worker.start()
        wait_for_blocked_give_up(db)
        status, answer = _result(client, "s1", "3 passed")
        result_tx.commit()
        worker.join(10)
        assert not worker.is_alive()
        give_up_tx.commit()

    assert (status, answer["id"]) == (200, "c3")
    calls = rows(db, "SELECT id, status, result FROM observations ORDER BY seq")
    assert [(c["id"], c["status"], c["result"]) for c in calls] == [
        ("c1", "captured", None),
        ("c2", "captured", "2 passed"),
        ("c3", "captured", "3 passed"),
    ]
    assert row(db, "SELECT count(*) AS n FROM observations")["n"] == 3


def _summaries(fake: FakeGemini) -> list[str]:
    return [
        c.body["contents"][0]["parts"][0]["text"]
        for c in fake.calls(":generateContent")
        if c.body["systemInstruction"]["parts"][0]["text"] == SUMMARY_INSTRUCTIONS
    ]


def test_a_result_landing_during_the_give_up_costs_no_second_summary(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """c2's result holds its row while the summary's give-up reaches it: the give-up waits, then
    finds c2 captured with its result and gives up on nothing. The summary read c2 as pending
    before: written then, Gemini summarised a session missing c2's result, and c2's compression
    had it summarised again (two summary calls, the first wasted). It waits for c2 instead."""
    _running_tests(client)
    _end(client, "s1")
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _: FakeResponse(body=text_answer("ran the api tests")))
        settings = make_settings(
            gemini_api_key="k",
            gemini_base_url=fake.url,
            gemini_requests_per_minute=100_000,
            worker_result_grace_seconds=0,
        )
        with psycopg.connect(libpq_url(database_url)) as result_tx:
            result_tx.execute(_C2_RESULT)
            drain_while_held(db, result_tx, settings, database_url)
        summaries = _summaries(fake)

    assert len(summaries) == 1
    assert summaries[0].endswith("run_shell_command pytest -x tests/api\nResult: 2 passed")
    session = row(db, "SELECT status, total_observations FROM sessions")
    assert (session["status"], session["total_observations"]) == ("summarized", 2)


async def _summarise_claimed_after(settings: Settings, database_url: str, late: Any) -> str:
    """Claim the session's summary as a lane does, run `late()`, then the summary job."""
    async with worker_on(settings, database_url) as worker:
        async with transaction(worker.ctx.sessionmaker) as session:
            (work,) = await claims.claim_sessions(
                session, worker=worker.id, lease=60, limit=1, max_attempts=5
            )
        await asyncio.to_thread(late)
        return await jobs.summarize_session(worker.ctx, work)


def test_a_result_landing_after_the_claim_costs_no_second_summary(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A checkpoint while c2 runs, its summary claimed; then c2's result comes. Summarised then,
    the session missed it, and c2's compression had it summarised again (two summary calls)."""
    _running_tests(client)
    db.execute(
        "UPDATE observations SET status = 'compressed', compressed_data = 'ran' WHERE id = 'c1'"
    )
    assert client.post("/api/summarize", json={"sessionId": "s1"}).status_code == 202
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _: FakeResponse(body=text_answer("ran the api tests")))
        settings = make_settings(
            gemini_api_key="k", gemini_base_url=fake.url, gemini_requests_per_minute=100_000
        )
        outcome = asyncio.run(
            _summarise_claimed_after(
                settings, database_url, lambda: _result(client, "s1", "2 passed", "c2")
            )
        )
        drain(settings, database_url)
        summaries = _summaries(fake)

    assert outcome == "waiting"
    assert len(summaries) == 1
    assert summaries[0].endswith("run_shell_command pytest -x tests/api\nResult: 2 passed")


def test_a_capture_batch_locking_the_calls_newest_first_costs_no_attempt(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Results of parallel calls answered in one capture batch (one transaction), c3's before
    c1's, while the summary's give-up locks oldest first: each waits for the other, and Postgres
    ends the give-up (`DeadlockDetected`). The job logged a traceback, spent an attempt and
    backed off; the claim now goes back at once, and the session is summarised with both."""
    _three_calls_ended(client, db)
    with psycopg.connect(libpq_url(database_url)) as batch:
        batch.execute(_APPLY_RESULT.format(result="ok", id="c3"))
        # c1's result then waits for the give-up, which waits for c3: the deadlock.
        c1 = _APPLY_RESULT.format(result="ok", id="c1")
        drain_while_held(db, batch, NO_GRACE, database_url, then=lambda: batch.execute(c1))

    session = row(db, "SELECT status, attempts, last_error FROM sessions")
    assert (session["status"], session["last_error"]) == ("summarized", None)
    assert session["attempts"] == 1
    calls = rows(db, "SELECT id, result FROM observations ORDER BY seq")
    assert [(c["id"], c["result"]) for c in calls] == [("c1", "ok"), ("c2", None), ("c3", "ok")]
