"""Sessions end to end, waking on NOTIFY, TTL purges, metrics, and the worker inside `serve`."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app.llm.summarize import SUMMARY_INSTRUCTIONS
from app.main import create_app
from tests.conftest import make_settings
from tests.fakes.gemini import FakeResponse, RecordedRequest, fake_gemini, text_answer
from tests.worker.builders import (
    LONG_RESULT,
    drain,
    make_observation,
    make_session,
    row,
    rows,
    run_until,
)

SUMMARY = (
    "The session fixed the token expiry check in src/auth/jwt.ts. It read the verifier, ran the "
    "tests and changed the comparison. The expiry test now passes."
)


def _answer(request: RecordedRequest) -> FakeResponse:
    system = request.body["systemInstruction"]["parts"][0]["text"]
    if system == SUMMARY_INSTRUCTIONS:
        return FakeResponse(body=text_answer(SUMMARY, prompt_tokens=400, output_tokens=60))
    marker = request.body["contents"][0]["parts"][0]["text"].split("src/")[1].split(".ts")[0]
    return FakeResponse(
        body=text_answer(f"Learned: {marker} verified", prompt_tokens=500, output_tokens=8)
    )


def test_ended_session_is_summarised_after_its_observations(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, status="active")
    for n in range(5):
        make_observation(db, f"o{n}")
    with fake_gemini() as fake:
        fake.on(":generateContent", _answer)
        settings = make_settings(
            gemini_api_key="k", gemini_base_url=fake.url, gemini_requests_per_minute=100_000
        )
        drain(settings, database_url)
        assert row(db, "SELECT status FROM sessions")["status"] == "active"
        db.execute("UPDATE sessions SET status = 'ending', ended_at = now()")
        drain(settings, database_url)
        (summary_call,) = [
            c
            for c in fake.calls(":generateContent")
            if c.body["systemInstruction"]["parts"][0]["text"] == SUMMARY_INSTRUCTIONS
        ]

    session = row(db, "SELECT * FROM sessions")
    assert session["status"] == "summarized"
    assert session["summary"] == SUMMARY
    assert session["summary_generated_by"] == "gemini:gemini-2.5-flash"
    assert session["total_observations"] == 5
    saved = row(db, "SELECT sum(tokens_saved) AS n FROM observations")["n"]
    assert session["tokens_saved"] == saved > 0
    assert session["ended_at"] is not None
    assert session["summarized_at"] is not None
    sent = summary_call.body["contents"][0]["parts"][0]["text"]
    assert "User prompt: fix the token check" in sent
    assert all(f"Learned: o{n} verified" in sent for n in range(5))
    assert summary_call.body["generationConfig"]["temperature"] == 0.2
    # The summary is in the one search index, embedded, as the context builder reads it.
    (chunk,) = rows(db, "SELECT * FROM memory_chunks WHERE source = 'summary'")
    assert (chunk["content"], chunk["session_id"]) == (SUMMARY, "s1")
    assert chunk["embedding"] is not None
    assert row(db, "SELECT count(*) AS n FROM memory_chunks WHERE embedding IS NULL")["n"] == 0


def test_fallback_session_summary_is_prose_from_its_observations(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, status="ending")
    make_observation(db, "o1", args={"path": "src/auth/jwt.ts"})
    make_observation(
        db,
        "o2",
        function_name="write_file",
        observation_type="file_write",
        args={"path": "src/auth/jwt.ts", "content": LONG_RESULT},
        result="wrote 3 lines",
    )
    drain(make_settings(), database_url)

    session = row(db, "SELECT * FROM sessions")
    assert session["status"] == "summarized"
    assert session["summary_generated_by"] == "extractive"
    text = session["summary"]
    assert text.startswith('This session in /home/dev/shop on "fix the token check" made 2 tool')
    assert "src/auth/jwt.ts" in text
    assert 2 <= text.count(". ") + 1 <= 5
    diff = row(db, "SELECT compressed_data FROM observations WHERE id = 'o2'")["compressed_data"]
    assert "Diff: +39/-0 lines" in diff


def test_notify_wakes_an_idle_worker_at_once(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    inserted: dict[str, float] = {}

    def done() -> bool:
        if "at" not in inserted:
            # Let the worker go idle first: its poll is a minute, so only NOTIFY can wake it.
            if time.monotonic() - started < 3.0:
                return False
            inserted["at"] = time.monotonic()
            make_observation(db, "o1")
        compressed = row(db, "SELECT count(*) AS n FROM observations WHERE status = 'compressed'")
        return bool(compressed["n"])

    started = time.monotonic()
    total = run_until(make_settings(worker_poll_seconds=60), database_url, done, timeout=20)
    stored = row(db, "SELECT compressed_at - created_at AS took FROM observations")
    server_side = stored["took"].total_seconds()
    print(
        f"insert-to-compressed: {server_side * 1000:.0f} ms in the database, "
        f"{(started + total - inserted['at']) * 1000:.0f} ms seen by the test"
    )
    assert server_side < 1.0


def test_expired_memories_are_purged(db: psycopg.Connection[Any], database_url: str) -> None:
    db.execute(
        "INSERT INTO memories (scope, key, value, expires_at) VALUES "
        "('global', 'old', '1', now() - interval '1 second'), "
        "('global', 'live', '2', now() + interval '1 hour'), ('global', 'forever', '3', NULL)"
    )
    drain(make_settings(), database_url)
    assert [r["key"] for r in rows(db, "SELECT key FROM memories ORDER BY key")] == [
        "forever",
        "live",
    ]


def test_health_shows_worker_metrics(client: TestClient, db: psycopg.Connection[Any]) -> None:
    make_session(db, status="ending")
    make_session(db, "s2", project_path="/home/dev/api")
    make_observation(db, "c1")
    make_observation(db, "c2")
    make_observation(db, "f1", status="failed")
    make_observation(db, "p1", status="pending")
    make_observation(db, "k1", session_id="s2", project_path="/home/dev/api", status="compressed")
    db.execute("UPDATE observations SET tokens_saved = 40 WHERE id = 'k1'")
    db.execute("UPDATE observations SET locked_until = now() + interval '1 minute' WHERE id='c2'")
    db.execute("UPDATE observations SET result_at = now() - interval '90 seconds' WHERE id='c1'")

    worker = client.get("/health").json()["worker"]

    assert worker["pending"] == 2  # c1 and the ending session
    assert worker["inFlight"] == 1
    assert worker["failed"] == 1
    assert worker["compressed"] == 1
    assert worker["awaitingResult"] == 1
    assert worker["oldestPendingSeconds"] >= 90
    assert worker["tokensSaved"] == 40
    assert worker["tokensSavedByProject"] == {"/home/dev/api": 40}


def test_serve_runs_a_worker_in_process(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any
) -> None:
    make_session(db)
    make_observation(db, "o1", result=LONG_RESULT)
    app = create_app(make_settings(home=tmp_path), database_url=database_url, run_worker=True)
    with TestClient(app) as test_client:
        deadline = time.monotonic() + 20
        while row(db, "SELECT status FROM observations")["status"] != "compressed":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        health = test_client.get("/health").json()
        assert health["worker"]["compressed"] == 1
        # Its LISTEN connection is what /health counts as a running worker.
        while health["worker"]["running"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
            health = test_client.get("/health").json()
        assert (health["status"], health["problems"]) == ("ok", [])


def test_a_result_that_comes_after_the_summary_is_summarised_again(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """An interceptor ends its session as the task ends, and the last command's result may come
    after the worker summarised it (it wakes on the end's NOTIFY: 71 ms, docs/worker.md). That
    result, often the one that says how the task ended, was never in the session's summary.
    (The worker now waits AGMEM_WORKER_RESULT_GRACE_SECONDS for a result in flight at the end;
    at 0 it gives up on the call at once, and the result comes after the summary.)"""
    settings = make_settings(worker_result_grace_seconds=0)
    session = {"projectPath": "/home/dev/shop", "id": "late-1", "userPrompt": "ship v2"}
    assert client.post("/api/session/start", json=session).status_code == 201
    for call_id, command, output in (
        ("c1", "npm test", "Tests: 42 passed"),
        ("c2", "make deploy", "deployed v2 to prod-eu-1"),
    ):
        call = {"sessionId": "late-1", "id": call_id, "functionName": "run_shell_command"}
        reply = client.post("/api/observe", json={**call, "functionArgs": {"command": command}})
        assert reply.status_code == 201
        if call_id == "c2":
            assert client.post("/api/session/end", json={"sessionId": "late-1"}).status_code == 202
            drain(settings, database_url)
            first = row(db, "SELECT status, summary FROM sessions WHERE id = 'late-1'")
        result = {"sessionId": "late-1", "observationId": call_id, "result": output}
        reply = client.post(
            "/api/observe/result", json={**result, "functionName": "run_shell_command"}
        )
        assert reply.status_code == 200
    drain(settings, database_url)

    assert first["status"] == "summarized"
    assert "prod-eu-1" not in first["summary"]
    again = row(db, "SELECT status, summary FROM sessions WHERE id = 'late-1'")
    assert again["status"] == "summarized"
    assert "deployed v2 to prod-eu-1" in again["summary"]


def test_a_result_compressed_while_its_session_is_being_summarised_is_summarised_again(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    """A session is claimed while its last call still waits for its result (only `captured`
    observations hold a summary back); the result comes and is compressed by another lane during
    the Gemini call (1-30 s). The summary being written then misses it, and the session was
    `ending`, not `summarized`, so nothing put it back: the claim in flight must be dropped."""
    session = {"projectPath": "/home/dev/shop", "id": "late-2", "userPrompt": "ship v3"}
    assert client.post("/api/session/start", json=session).status_code == 201
    call = {"sessionId": "late-2", "id": "c1", "functionName": "run_shell_command"}
    reply = client.post("/api/observe", json={**call, "functionArgs": {"command": "make deploy"}})
    assert reply.status_code == 201
    assert client.post("/api/session/end", json={"sessionId": "late-2"}).status_code == 202
    # A lane's claim of the session, its summary call still in flight.
    db.execute(
        "UPDATE sessions SET locked_by = 'lane-in-flight', attempts = attempts + 1, "
        "locked_until = now() + interval '10 minutes' WHERE id = 'late-2'"
    )
    result = {"sessionId": "late-2", "observationId": "c1", "result": "deployed v3 to prod-eu-2"}
    reply = client.post("/api/observe/result", json={**result, "functionName": "run_shell_command"})
    assert reply.status_code == 200
    drain(make_settings(), database_url)

    again = row(db, "SELECT status, summary, locked_by FROM sessions WHERE id = 'late-2'")
    assert again["status"] == "summarized"
    assert "deployed v3 to prod-eu-2" in again["summary"]
    assert again["locked_by"] is None  # the lane in flight finishes on `locked_by`: refused
