"""A call whose result never comes: given up on once its session ended (after a grace for a
result in flight) or once it is too old, compressed as a call with no result, in the summary and
search; a late result still attaches by id, and by function name becomes a new observation."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings
from app.llm.compress import COMPRESSION_INSTRUCTIONS
from app.llm.summarize import SUMMARY_INSTRUCTIONS
from tests.conftest import libpq_url, make_settings
from tests.fakes.gemini import FakeResponse, RecordedRequest, fake_gemini, text_answer
from tests.worker.builders import LONG_RESULT, drain, row, rows, run_until

PROJECT = "/home/dev/shop"
SHELL = "run_shell_command"
NO_GRACE = make_settings(worker_result_grace_seconds=0)


def _start(client: TestClient, session_id: str) -> None:
    body = {"projectPath": PROJECT, "id": session_id, "userPrompt": "fix the api tests"}
    assert client.post("/api/session/start", json=body).status_code == 201


def _call(client: TestClient, session_id: str, call_id: str, command: str) -> None:
    body = {"sessionId": session_id, "id": call_id, "functionName": SHELL}
    reply = client.post("/api/observe", json={**body, "functionArgs": {"command": command}})
    assert reply.status_code == 201


def _result(
    client: TestClient, session_id: str, output: str, call_id: str | None = None
) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"sessionId": session_id, "functionName": SHELL, "result": output}
    if call_id is not None:
        body["observationId"] = call_id
    reply = client.post("/api/observe/result", json=body)
    return reply.status_code, reply.json()


def _end(client: TestClient, session_id: str) -> None:
    assert client.post("/api/session/end", json={"sessionId": session_id}).status_code == 202


def _running_tests(client: TestClient, session_id: str = "s1") -> None:
    """`npm ci` answered (c1); `pytest -x tests/api` (c2) still running."""
    _start(client, session_id)
    _call(client, session_id, "c1", "npm ci")
    assert _result(client, session_id, "added 312 packages", "c1")[0] == 200
    _call(client, session_id, "c2", "pytest -x tests/api")


def wait_for_blocked_give_up(db: psycopg.Connection[Any]) -> None:
    """Until a give-up waits for a row lock (the statements that lock FOR UPDATE and wait)."""
    deadline = time.monotonic() + 60
    while not rows(
        db,
        "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE NOT l.granted AND strpos(a.query, 'FOR UPDATE') > 0",
    ):
        assert time.monotonic() < deadline, "the give-up never waited for a row lock"
        time.sleep(0.02)


def drain_while_held(
    db: psycopg.Connection[Any],
    held: psycopg.Connection[Any],
    settings: Settings,
    database_url: str,
    then: Callable[[], object] = lambda: None,
) -> None:
    """A worker drains while `held`'s open transaction holds a row: once the give-up waits for
    it, `then()`, and `held` commits."""
    worker = threading.Thread(target=drain, args=(settings, database_url))
    worker.start()
    wait_for_blocked_give_up(db)
    then()
    held.commit()
    worker.join(30)
    assert not worker.is_alive()


def _ended_with_a_lost_result(client: TestClient, session_id: str = "s1") -> None:
    """`pytest -x tests/api` never answers (the agent was killed); then the end."""
    _running_tests(client, session_id)
    _end(client, session_id)


def test_a_call_without_result_is_compressed_summarised_and_searchable_after_the_end(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    _ended_with_a_lost_result(client)
    drain(NO_GRACE, database_url)

    call = client.get("/api/observations/c2").json()
    assert (call["status"], call["result"], call["resultAt"]) == ("compressed", None, None)
    assert call["resultMissing"] is True
    assert call["compressedData"] == f"{SHELL} pytest -x tests/api\nResult: (none recorded)"
    assert client.get("/api/observations/c1").json()["resultMissing"] is False
    session = client.get("/api/sessions/s1").json()
    assert session["status"] == "summarized"
    assert session["totalObservations"] == 2
    assert session["observationCounts"] == {
        "pending": 0,
        "captured": 0,
        "compressed": 2,
        "failed": 0,
    }
    assert session["summary"].startswith(f'This session in {PROJECT} on "fix the api tests" made 2')
    assert f"1 call had no result recorded: {SHELL} pytest -x tests/api." in session["summary"]
    assert "Notable results" in session["summary"]  # npm ci's, not the call without one
    assert "pytest" not in session["summary"].split("Notable results")[1].split(".")[0]
    found = client.post(
        "/api/search", json={"query": "pytest", "projectPath": PROJECT, "mode": "keyword"}
    ).json()["results"]
    assert "c2" in [r["observationId"] for r in found]
    worker = client.get("/health").json()["worker"]
    assert (worker["awaitingResult"], worker["withoutResult"]) == (0, 1)


def test_a_result_in_flight_at_the_end_is_waited_for(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The interceptor sends the end right after the last result: within the grace the worker
    summarises nothing, and the summary, written once, has the result."""
    _ended_with_a_lost_result(client)
    drain(make_settings(), database_url)  # the default grace, 30 s

    assert row(db, "SELECT status FROM observations WHERE id = 'c2'")["status"] == "pending"
    waiting = row(
        db, "SELECT status, attempts, summary, next_attempt_at - ended_at AS due FROM sessions"
    )
    assert (waiting["status"], waiting["attempts"], waiting["summary"]) == ("ending", 0, None)
    # Due again when the grace ends (the worker sleeps until then: it does not poll).
    assert waiting["due"].total_seconds() == pytest.approx(30, abs=0.01)

    status, answer = _result(client, "s1", "1 failed: test_orders_total", "c2")
    assert (status, answer["id"], answer["status"]) == (200, "c2", "captured")
    db.execute("UPDATE sessions SET next_attempt_at = now()")  # as if the grace had passed
    drain(make_settings(), database_url)

    session = row(db, "SELECT status, summary FROM sessions")
    assert session["status"] == "summarized"
    assert "1 failed: test_orders_total" in session["summary"]
    assert "no result recorded" not in session["summary"]
    assert client.get("/api/observations/c2").json()["resultMissing"] is False


def test_a_late_result_by_id_attaches_and_the_session_is_summarised_again(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    _ended_with_a_lost_result(client)
    drain(NO_GRACE, database_url)
    first = row(db, "SELECT summary FROM sessions")["summary"]

    assert _result(client, "s1", "1 failed: test_orders_total", "c2")[0] == 200
    drain(NO_GRACE, database_url)

    call = client.get("/api/observations/c2").json()
    assert (call["status"], call["result"], call["resultMissing"]) == (
        "compressed",
        "1 failed: test_orders_total",
        False,
    )
    assert "1 failed: test_orders_total" in call["compressedData"]
    session = client.get("/api/sessions/s1").json()
    assert "no result recorded" in first
    assert "1 failed: test_orders_total" in session["summary"]
    assert "no result recorded" not in session["summary"]
    assert (session["status"], session["totalObservations"]) == ("summarized", 2)
    assert client.get("/health").json()["worker"]["withoutResult"] == 0


def test_a_late_result_by_name_does_not_match_a_call_given_up_on(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    _ended_with_a_lost_result(client)
    drain(NO_GRACE, database_url)

    status, answer = _result(client, "s1", "1 failed: test_orders_total")
    drain(NO_GRACE, database_url)

    assert (status, answer["status"]) == (201, "captured")
    assert answer["id"] not in ("c1", "c2")
    assert client.get("/api/observations/c2").json()["resultMissing"] is True
    late = client.get(f"/api/observations/{answer['id']}").json()
    assert (late["status"], late["result"]) == ("compressed", "1 failed: test_orders_total")
    session = client.get("/api/sessions/s1").json()
    assert (session["status"], session["totalObservations"]) == ("summarized", 3)
    assert "1 failed: test_orders_total" in session["summary"]


def test_a_call_pending_past_the_timeout_is_given_up_in_a_session_nobody_ends(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    _start(client, "s1")
    _call(client, "s1", "old", "pytest -x tests/api")
    _call(client, "s1", "recent", "npm run build")
    db.execute("UPDATE observations SET created_at = now() - interval '7 hours' WHERE id = 'old'")

    drain(make_settings(), database_url)  # the default timeout, 6 hours

    old = client.get("/api/observations/old").json()
    assert (old["status"], old["resultMissing"]) == ("compressed", True)
    assert old["compressedData"].endswith("Result: (none recorded)")
    assert row(db, "SELECT status FROM observations WHERE id = 'recent'")["status"] == "pending"
    assert row(db, "SELECT status FROM sessions")["status"] == "active"  # not ended for it
    worker = client.get("/health").json()["worker"]
    assert (worker["awaitingResult"], worker["withoutResult"]) == (1, 1)
    env = {"DATABASE_URL": database_url, "AGMEM_LOG_LEVEL": "error"}
    status = CliRunner().invoke(cli, ["status"], env=env)
    assert "summarized 0, awaiting result 1, without result 1, oldest pending" in status.stdout

    db.execute("UPDATE observations SET created_at = now() - interval '2 minutes'")
    drain(make_settings(worker_result_timeout_seconds=60), database_url)
    assert row(db, "SELECT status FROM observations WHERE id = 'recent'")["status"] == "compressed"


def _no_guessing(request: RecordedRequest) -> FakeResponse:
    system = request.body["systemInstruction"]["parts"][0]["text"]
    sent = request.body["contents"][0]["parts"][0]["text"]
    if system == SUMMARY_INSTRUCTIONS:
        return FakeResponse(body=text_answer("The session ran the api tests; no outcome known."))
    assert system == COMPRESSION_INSTRUCTIONS
    return FakeResponse(body=text_answer(f"Learned: ran {sent.count('no result was recorded')}"))


def test_gemini_is_told_no_result_was_recorded(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    _start(client, "s1")
    # Large enough to go to Gemini (AGMEM_WORKER_MIN_COMPRESS_TOKENS).
    _call(client, "s1", "c1", LONG_RESULT)
    _end(client, "s1")
    with fake_gemini() as fake:
        fake.on(":generateContent", _no_guessing)
        settings = make_settings(
            gemini_api_key="k",
            gemini_base_url=fake.url,
            gemini_requests_per_minute=100_000,
            worker_result_grace_seconds=0,
        )
        drain(settings, database_url)
        sent = [c.body["contents"][0]["parts"][0]["text"] for c in fake.calls(":generateContent")]

    compress, summarize = sent
    assert compress.endswith(
        "Result:\n(no result was recorded for this call: its outcome is unknown, do not guess it)"
    )
    assert "1. [code_execution] (no result was recorded) Learned: ran 1" in summarize
    assert row(db, "SELECT compressed_data FROM observations")["compressed_data"] == (
        "Learned: ran 1"
    )


def test_a_result_holding_its_row_lock_is_not_overtaken_by_the_give_up(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The result's transaction took the call's row before the worker gave up on it: the give-up
    waits for it, then finds the call captured, and compresses it with its result."""
    _ended_with_a_lost_result(client)
    with psycopg.connect(libpq_url(database_url)) as result_tx:
        result_tx.execute(
            "UPDATE observations SET status = 'captured', result = to_jsonb('2 passed'::text), "
            "result_at = now(), next_attempt_at = now() WHERE id = 'c2'"
        )
        drain_while_held(db, result_tx, NO_GRACE, database_url)

    call = client.get("/api/observations/c2").json()
    assert (call["status"], call["resultMissing"]) == ("compressed", False)
    assert call["compressedData"].endswith("Result: 2 passed")
    assert "2 passed" in row(db, "SELECT summary FROM sessions")["summary"]


def test_a_result_waiting_on_the_give_up_attaches_to_the_call(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The worker's give-up took the call's row first (its transaction still open): the result
    waits for it, then attaches to the given-up call by its id, which is compressed with it."""
    _ended_with_a_lost_result(client)
    answers: list[tuple[int, dict[str, Any]]] = []
    with psycopg.connect(libpq_url(database_url)) as give_up_tx:
        # What the give-up writes (app/worker/unanswered.py), its transaction not yet committed.
        give_up_tx.execute(
            "UPDATE observations SET status = 'captured', next_attempt_at = now(), attempts = 0 "
            "WHERE id = 'c2' AND status = 'pending'"
        )
        sender = threading.Thread(target=lambda: answers.append(_result(client, "s1", "ok", "c2")))
        sender.start()
        deadline = time.monotonic() + 60
        while not rows(db, "SELECT 1 FROM pg_locks WHERE NOT granted"):
            assert time.monotonic() < deadline, "the result never waited for the give-up's lock"
            time.sleep(0.02)
        give_up_tx.commit()
        sender.join(10)
    drain(NO_GRACE, database_url)

    assert [(status, answer["status"]) for status, answer in answers] == [(200, "captured")]
    call = client.get("/api/observations/c2").json()
    assert (call["status"], call["result"], call["resultMissing"]) == ("compressed", "ok", False)
    assert row(db, "SELECT count(*) AS n FROM observations")["n"] == 2


@pytest.mark.parametrize("by_id", [True, False])
def test_results_racing_the_give_up_are_never_lost(
    client: TestClient, db: psycopg.Connection[Any], database_url: str, by_id: bool
) -> None:
    """Results arrive while a running worker gives up on their calls (no grace): every result is
    stored once, each observation is compressed with what it ended with (its result, or none),
    and the session's summary counts them all."""
    _start(client, "s1")
    calls = [f"c{n}" for n in range(24)]
    for call_id in calls:
        _call(client, "s1", call_id, f"echo {call_id}")
    _end(client, "s1")
    answers: list[tuple[int, dict[str, Any]]] = []

    def send() -> None:
        for call_id in calls:
            answers.append(_result(client, "s1", f"out-{call_id}", call_id if by_id else None))
            time.sleep(0.005)

    sender = threading.Thread(target=send)

    def done() -> bool:
        if not sender.is_alive() and not answers:
            sender.start()
        if sender.is_alive() or len(answers) < len(calls):
            return False
        # One statement, one snapshot: a compression between two reads can queue the summary again.
        state = row(
            db,
            "SELECT status, (SELECT count(*) FROM observations "
            "WHERE status <> 'compressed') AS busy FROM sessions",
        )
        return state["status"] == "summarized" and state["busy"] == 0

    run_until(NO_GRACE, database_url, done, timeout=60)
    sender.join()

    assert all(status in (200, 201) for status, _ in answers)
    stored = rows(db, "SELECT id, result, compressed_data, result_at FROM observations")
    results = sorted(r["result"] for r in stored if r["result"] is not None)
    assert results == sorted(f"out-{c}" for c in calls)  # every result, once
    for r in stored:
        if r["result"] is not None:
            assert r["compressed_data"].endswith(f"Result: {r['result']}")
        else:
            assert r["compressed_data"].endswith("Result: (none recorded)")
    if by_id:
        assert len(stored) == len(calls)  # each attached to its call, given up on or not
    summary = row(db, "SELECT summary, total_observations FROM sessions")
    assert summary["total_observations"] == len(stored)


def test_a_checkpoint_of_a_session_at_work_gives_up_on_no_call(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """`POST /api/summarize` while the agent works: the summary of what has come is written at
    once, and the test run still going gets its result by name when it ends."""
    _running_tests(client)
    assert client.post("/api/summarize", json={"sessionId": "s1"}).status_code == 202
    drain(make_settings(), database_url)  # the default grace: a checkpoint does not wait on it

    checkpoint = row(db, "SELECT status, summary FROM sessions")
    assert checkpoint["summary"] is not None
    assert "npm ci" in checkpoint["summary"]
    assert client.get("/api/sessions/s1").json()["endedAt"] is None  # nobody ended it
    assert "no result recorded" not in checkpoint["summary"]
    assert row(db, "SELECT status FROM observations WHERE id = 'c2'")["status"] == "pending"
    status, answer = _result(client, "s1", "1 failed: test_orders_total")
    assert (status, answer["id"], answer["status"]) == (200, "c2", "captured")


def test_a_session_nobody_ends_is_ended_at_its_last_activity_once_idle(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """The IDE crashed: no end ever comes. Once idle for the bound (6 hours), the session is
    ended at its last activity and summarised; a call the next morning reopens nothing but is
    captured, and the session's end summarises it again."""
    _running_tests(client)
    _start(client, "s2")  # at work: left alone
    db.execute("UPDATE sessions SET last_activity_at = now() - interval '7 hours' WHERE id = 's1'")
    db.execute("UPDATE observations SET created_at = now() - interval '7 hours'")

    drain(make_settings(), database_url)  # its upkeep ends the session
    drain(make_settings(), database_url)  # which is then summarised like any ended one

    ended = row(
        db,
        "SELECT status, summary, ended_at BETWEEN last_activity_at AND now() - interval '6 hours'"
        " AS at_last FROM sessions"
        " WHERE id = 's1'",
    )
    assert (ended["status"], ended["at_last"]) == ("summarized", True)
    assert "npm ci" in ended["summary"]
    assert "1 call had no result recorded" in ended["summary"]
    assert client.get("/api/observations/c2").json()["resultMissing"] is True
    assert client.get("/api/sessions/s2").json()["status"] == "active"

    _call(client, "s1", "c3", "git status")
    assert _result(client, "s1", "nothing to commit, working tree clean", "c3")[0] == 200
    _end(client, "s1")
    drain(NO_GRACE, database_url)
    again = client.get("/api/sessions/s1").json()
    assert (again["status"], again["totalObservations"]) == ("summarized", 3)
    assert "git status" in again["summary"]


def test_a_checkpointed_session_at_work_since_is_summarised_again_once_idle(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    _start(client, "s1")
    _call(client, "s1", "c1", "npm ci")
    assert _result(client, "s1", "added 312 packages", "c1")[0] == 200
    assert client.post("/api/summarize", json={"sessionId": "s1"}).status_code == 202
    drain(make_settings(), database_url)
    assert row(db, "SELECT status FROM sessions")["status"] == "summarized"
    _call(client, "s1", "c2", "git status")
    assert _result(client, "s1", "nothing to commit, working tree clean", "c2")[0] == 200
    db.execute("UPDATE sessions SET last_activity_at = now() - interval '7 hours'")
    db.execute("UPDATE sessions SET summarized_at = last_activity_at - interval '1 minute'")

    drain(make_settings(), database_url)
    drain(make_settings(), database_url)

    again = row(db, "SELECT status, summary FROM sessions")
    assert again["status"] == "summarized"
    assert "git status" in again["summary"]
    drain(make_settings(), database_url)  # summarised after its last activity: not again
    assert row(db, "SELECT attempts, next_attempt_at FROM sessions")["next_attempt_at"] is None
