"""Observe, observe/result, get observation and compress: statuses and matching rules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
import pytest
from fastapi.testclient import TestClient

from app.capture import service
from app.capture.entities import MAX_PER_KIND, extract_entities, merge_entities
from app.capture.service import CALL_ENTITIES, CallEntities, SessionTouches
from app.tokens import estimate_tokens
from tests.capture.builders import count, make_session, observation, observe, send_result


def test_observe_records_a_pending_observation(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    response = client.post(
        "/api/observe",
        json={
            "sessionId": session_id,
            "functionName": "read_file",
            "functionArgs": {"absolute_path": "/home/dev/shop/cart.py"},
            "timestamp": 1_767_225_600_000,
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "pending"
    row = observation(db, body["id"])
    assert row["session_id"] == session_id
    assert row["project_path"] == "/home/dev/shop"
    assert row["function_args"] == {"absolute_path": "/home/dev/shop/cart.py"}
    assert row["observation_type"] == "file_read"
    assert row["entities"] == {"files": ["/home/dev/shop/cart.py"]}
    assert row["observed_at"] == datetime(2026, 1, 1, tzinfo=UTC)
    assert row["result"] is None
    assert row["next_attempt_at"] is None
    # 4 characters per token, of the stored JSON of the arguments.
    assert row["original_tokens"] == (len('{"absolute_path":"/home/dev/shop/cart.py"}') + 3) // 4


def test_observe_same_id_returns_first_answer_without_duplicate(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    body = {"sessionId": session_id, "functionName": "bash", "functionArgs": {"command": "ls"}}
    first = client.post("/api/observe", json=body | {"id": "call-1"})
    second = client.post("/api/observe", json=body | {"id": "call-1"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json() == second.json()
    assert count(db, "observations") == 1


def test_observe_same_id_after_result_returns_captured(client: TestClient) -> None:
    session_id = make_session(client)
    body = {"sessionId": session_id, "functionName": "bash", "functionArgs": {}, "id": "c1"}
    client.post("/api/observe", json=body)
    client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "bash", "result": "ok"},
    )
    repeat = client.post("/api/observe", json=body)
    assert repeat.status_code == 200
    assert repeat.json()["status"] == "captured"


def test_observe_same_id_different_body_is_409(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    observe(client, session_id, id="call-1", functionArgs={"file_path": "a.py"})
    response = client.post(
        "/api/observe",
        json={
            "sessionId": session_id,
            "functionName": "read_file",
            "functionArgs": {"file_path": "b.py"},
            "id": "call-1",
        },
    )
    assert response.status_code == 409
    assert response.json()["error"] == "ObservationIdConflict"
    assert observation(db, "call-1")["function_args"] == {"file_path": "a.py"}


def test_observe_unknown_session_is_404_and_stores_nothing(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    response = client.post(
        "/api/observe",
        json={"sessionId": "ghost", "functionName": "bash", "functionArgs": {}, "id": "x"},
    )
    assert response.status_code == 404
    assert response.json()["error"] == "SessionNotFound"
    assert count(db, "observations") == 0


def test_observe_on_ended_session_is_accepted(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    client.post("/api/session/end", json={"sessionId": session_id})
    body = observe(client, session_id)
    assert body["status"] == "pending"
    assert observation(db, body["id"])["session_id"] == session_id
    status = db.execute("SELECT status FROM sessions WHERE id = %s", (session_id,)).fetchone()
    assert status == ("ending",)


def test_observe_touches_session_activity(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(client)
    db.execute(
        "UPDATE sessions SET last_activity_at = now() - interval '1 hour' WHERE id = %s",
        (session_id,),
    )
    observe(client, session_id)
    fresh = db.execute(
        "SELECT last_activity_at > now() - interval '1 minute' FROM sessions WHERE id = %s",
        (session_id,),
    ).fetchone()
    assert fresh == (True,)


def _activity_hour_ago(db: psycopg.Connection[Any], session_id: str) -> None:
    db.execute(
        "UPDATE sessions SET last_activity_at = now() - interval '1 hour' WHERE id = %s",
        (session_id,),
    )


def _active_recently(db: psycopg.Connection[Any], session_id: str) -> bool:
    row = db.execute(
        "SELECT last_activity_at > now() - interval '1 minute' FROM sessions WHERE id = %s",
        (session_id,),
    ).fetchone()
    assert row is not None
    return bool(row[0])


def test_a_session_is_touched_by_one_statement_per_window(
    client: TestClient, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The touch goes with the first statement of a session in each TOUCH_SECONDS window; the
    # statements in between run without it (the plain form), whether calls or results.
    now = [1000.0]
    monkeypatch.setattr(service, "SESSION_TOUCHES", SessionTouches(16, clock=lambda: now[0]))
    session_id = make_session(client)
    observe(client, session_id, id="a")
    assert _active_recently(db, session_id)
    _activity_hour_ago(db, session_id)
    assert send_result(client, session_id, "a", "ok").status_code == 200
    observe(client, session_id, id="b")
    assert not _active_recently(db, session_id)
    now[0] += 5.0
    assert send_result(client, session_id, "b", "ok").status_code == 200
    assert _active_recently(db, session_id)


def test_session_touches_are_per_session_and_bounded() -> None:
    now = [0.0]
    touches = SessionTouches(2, clock=lambda: now[0])
    assert [touches.due("a"), touches.due("a"), touches.due("b")] == [True, False, True]
    now[0] = 1.0
    assert touches.due("c")  # over the bound: "a", touched longest ago, is forgotten
    now[0] = 2.0
    assert [touches.due("b"), touches.due("a")] == [False, True]
    now[0] = 5.9
    assert not touches.due("c")
    now[0] = 6.0
    assert touches.due("c")


def test_result_matches_by_observation_id(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(client)
    first = observe(client, session_id, id="a")
    observe(client, session_id, id="b")
    response = client.post(
        "/api/observe/result",
        json={
            "sessionId": session_id,
            "functionName": "read_file",
            "result": {"output": "class Cart:\n    pass"},
            "observationId": first["id"],
        },
    )
    assert response.status_code == 200
    assert response.json()["id"] == "a"
    assert response.json()["status"] == "captured"
    row = observation(db, "a")
    assert row["status"] == "captured"
    assert row["result"] == {"output": "class Cart:\n    pass"}
    assert row["result_at"] is not None
    assert row["next_attempt_at"] is not None
    assert row["entities"] == {"files": ["app/main.py"], "classes": ["Cart"]}
    assert observation(db, "b")["status"] == "pending"


def test_result_merges_into_the_stored_entities_when_they_differ_from_the_calls(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # The server merges a result's entities into those it stored with the call, in Python; if
    # the stored ones changed meanwhile (another process, a manual fix), Postgres merges instead.
    session_id = make_session(client)
    observe(client, session_id, id="a")
    db.execute("""UPDATE observations SET entities = '{"urls": ["https://x"]}' WHERE id = 'a'""")
    response = send_result(client, session_id, "a", "class Cart: pass")
    assert response.status_code == 200
    assert response.json()["status"] == "captured"
    row = observation(db, "a")
    assert row["entities"] == {"urls": ["https://x"], "classes": ["Cart"]}
    assert row["result"] == "class Cart: pass"


def test_result_entities_merge_the_same_in_python_and_in_postgres(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # A result whose call this server no longer remembers (a restart, another process) is merged
    # by Postgres: it must store what the Python merge stores, order and per-kind cap included.
    session_id = make_session(client)
    call = {"command": "cat " + " ".join(f"src/call_{n}.py" for n in range(12, 0, -1))}
    result = "\n".join(f"src/result_{n}.py" for n in range(15)) + "\nsrc/call_3.py\nclass Cart"
    for name in ("python", "postgres"):
        observe(client, session_id, id=name, functionName="bash", functionArgs=call)
    CALL_ENTITIES.take("postgres")
    for name in ("python", "postgres"):
        response = send_result(client, session_id, name, result, functionName="bash")
        assert response.json()["status"] == "captured"
    expected = merge_entities(extract_entities(call), extract_entities(result))
    assert len(expected["files"]) == MAX_PER_KIND  # 12 + 15 distinct: the cap applies
    assert expected["files"][:12] == [f"src/call_{n}.py" for n in range(12, 0, -1)]
    assert observation(db, "python")["entities"] == expected
    assert observation(db, "postgres")["entities"] == expected


def test_call_entities_keeps_the_newest_calls() -> None:
    calls = CallEntities(2)
    for name in ("a", "b", "c"):
        calls.remember(name, {"files": [name]}, f'{{"files":["{name}"]}}')
    assert calls.take("a") is None
    assert calls.take("c") == ({"files": ["c"]}, '{"files":["c"]}')
    assert calls.take("c") is None
    assert calls.take("b") is not None


def test_result_matches_newest_pending_of_that_function(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    observe(client, session_id, id="old")
    observe(client, session_id, id="new")
    observe(client, session_id, id="shell", functionName="bash", functionArgs={"command": "ls"})
    response = client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "read_file", "result": "text"},
    )
    assert response.status_code == 200
    assert response.json()["id"] == "new"
    again = client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "read_file", "result": "text 2"},
    )
    assert again.json()["id"] == "old"
    assert observation(db, "shell")["status"] == "pending"


def test_result_without_pending_call_records_new_observation(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    response = client.post(
        "/api/observe/result",
        json={
            "sessionId": session_id,
            "functionName": "run_shell_command",
            "result": "npm ERR! ENOENT",
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "captured"
    row = observation(db, body["id"])
    assert row["result"] == "npm ERR! ENOENT"
    assert row["function_args"] == {}
    assert row["observation_type"] == "code_execution"
    assert row["entities"] == {"errors": ["ENOENT"]}
    assert row["next_attempt_at"] is not None


def test_result_with_unknown_observation_id_is_kept_under_that_id(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    body = {
        "sessionId": session_id,
        "functionName": "grep",
        "result": "x",
        "observationId": "late-1",
    }
    first = client.post("/api/observe/result", json=body)
    second = client.post("/api/observe/result", json=body)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"] == "late-1"
    assert count(db, "observations") == 1
    assert observation(db, "late-1")["observation_type"] == "search"


def test_result_repeat_same_is_200_different_is_409(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    observe(client, session_id, id="a")
    body = {"sessionId": session_id, "functionName": "read_file", "observationId": "a"}
    first = client.post("/api/observe/result", json=body | {"result": "one"})
    repeat = client.post("/api/observe/result", json=body | {"result": "one"})
    different = client.post("/api/observe/result", json=body | {"result": "two"})
    assert (first.status_code, repeat.status_code, different.status_code) == (200, 200, 409)
    assert observation(db, "a")["result"] == "one"


def test_result_for_observation_of_another_session_is_409(client: TestClient) -> None:
    first = make_session(client, id="s1")
    second = make_session(client, id="s2")
    observe(client, first, id="a")
    response = client.post(
        "/api/observe/result",
        json={"sessionId": second, "functionName": "read_file", "result": 1, "observationId": "a"},
    )
    assert response.status_code == 409


def test_result_unknown_session_is_404(client: TestClient, db: psycopg.Connection[Any]) -> None:
    response = client.post(
        "/api/observe/result", json={"sessionId": "ghost", "functionName": "x", "result": 1}
    )
    assert response.status_code == 404
    assert count(db, "observations") == 0


def test_result_null_is_a_result(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(client)
    observe(client, session_id, id="a")
    response = client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "read_file", "result": None},
    )
    assert response.status_code == 200
    assert observation(db, "a")["status"] == "captured"


def test_get_observation(client: TestClient) -> None:
    session_id = make_session(client)
    observe(
        client,
        session_id,
        id="a",
        functionName="web_fetch",
        functionArgs={"url": "https://x.dev/a"},
    )
    client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "web_fetch", "result": "<html>"},
    )
    body = client.get("/api/observations/a").json()
    assert body["id"] == "a"
    assert body["sessionId"] == session_id
    assert body["functionArgs"] == {"url": "https://x.dev/a"}
    assert body["result"] == "<html>"
    assert body["observationType"] == "web"
    assert body["status"] == "captured"
    assert body["compressedData"] is None
    assert body["compressedTokens"] is None
    assert body["tokensSaved"] is None
    assert body["originalTokens"] > 0
    assert body["entities"] == {"urls": ["https://x.dev/a"]}


def test_get_unknown_observation_is_404(client: TestClient) -> None:
    response = client.get("/api/observations/nope")
    assert response.status_code == 404
    assert response.json()["error"] == "ObservationNotFound"


def test_compress_queues_and_reports_position(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    for name in ("a", "b", "c"):
        observe(client, session_id, id=name)
        client.post(
            "/api/observe/result",
            json={"sessionId": session_id, "functionName": "read_file", "result": name},
        )
    db.execute("UPDATE observations SET status = 'failed', attempts = 5 WHERE id = 'b'")
    response = client.post("/api/compress", json={"observationId": "b"})
    assert response.status_code == 202
    assert response.json() == {"queued": True, "position": 3}
    row = observation(db, "b")
    assert (row["status"], row["attempts"]) == ("captured", 0)


@pytest.mark.parametrize(
    "worker_state",
    [
        # The worker compressed it without a result ("Result: none").
        "status = 'compressed', compressed_data = 'read_file Result: none', attempts = 1",
        # The worker is compressing it right now.
        "locked_by = 'w1', locked_until = now() + interval '2 minutes', attempts = 1",
    ],
)
def test_a_result_after_an_early_compress_is_stored_and_queued(
    client: TestClient, db: psycopg.Connection[Any], worker_state: str
) -> None:
    session_id = make_session(client)
    observe(client, session_id, id="early")
    # Compressing a call whose result has not arrived yet is allowed ("any observation")...
    assert client.post("/api/compress", json={"observationId": "early"}).status_code == 202
    db.execute(f"UPDATE observations SET {worker_state} WHERE id = 'early'")

    # ... and its result, when it comes, must not be refused as "a different result".
    response = send_result(client, session_id, "early", "def main(): ...")
    retried = send_result(client, session_id, "early", "def main(): ...")

    assert (response.status_code, response.json()["status"]) == (200, "captured")
    assert retried.status_code == 200
    row = observation(db, "early")
    assert row["result"] == "def main(): ..."
    assert row["result_at"] is not None
    # Queued again with fresh attempts; a worker still on the result-less call no longer owns it.
    assert (row["status"], row["attempts"], row["locked_by"]) == ("captured", 0, None)
    assert count(db, "observations") == 1


def test_compress_unknown_observation_is_404(client: TestClient) -> None:
    assert client.post("/api/compress", json={"observationId": "nope"}).status_code == 404


def test_string_payloads_through_a_sqlalchemy_session_are_stored_as_json_strings(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    # The proxy records through SQLAlchemy, not the capture writer: a string payload is bound
    # there as text for to_jsonb, and must be stored (cleaned) as the same JSON string.
    from app.capture.schemas import ObserveIn, ObserveResultIn
    from app.db.engine import make_async_engine, make_sessionmaker
    from tests.conftest import make_settings

    session_id = make_session(client)
    settings = make_settings()

    async def record() -> None:
        engine = make_async_engine(database_url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as db_session, db_session.begin():
                call = ObserveIn(
                    session_id=session_id, function_name="bash", function_args="ls src", id="s"
                )
                await service.record_observation(db_session, data=call, settings=settings)
                answer = ObserveResultIn(
                    session_id=session_id,
                    function_name="bash",
                    result='key AIzaSyA1234567890abcdefghijklmnopqrstuv "quoted"\x00',
                    observation_id="s",
                )
                await service.record_result(db_session, data=answer, settings=settings)
        finally:
            await engine.dispose()

    asyncio.run(record())

    row = observation(db, "s")
    assert row["function_args"] == "ls src"
    assert row["result"] == 'key [REDACTED] "quoted"'
    assert row["status"] == "captured"


def test_original_tokens_count_a_wide_character_as_a_token_as_the_worker_does(
    client: TestClient,
) -> None:
    # Capture's count is what the worker's compressed count is subtracted from: at four
    # characters a token for both, a Chinese call "saved" a negative number of tokens.
    session_id = make_session(client)
    args = {"summary": "產生專案指令文件 (GEMINI.md)"}
    result = "正在進行專案研究以產生 GEMINI.md 檔案。"
    observe(client, session_id, id="wide", functionName="update_topic", functionArgs=args)
    client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "update_topic", "result": result},
    )
    body = client.get("/api/observations/wide").json()
    args_text = orjson.dumps(args).decode()
    assert body["originalTokens"] == estimate_tokens(args_text) + estimate_tokens(result)
    assert body["originalTokens"] > (len(args_text) + 3) // 4 + (len(result) + 3) // 4
