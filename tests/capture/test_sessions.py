"""Session routes: start, end, list, get, summarize."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

from tests.capture.builders import count, make_session, observe


def test_start_creates_a_session(client: TestClient, db: psycopg.Connection[Any]) -> None:
    response = client.post(
        "/api/session/start",
        json={"projectPath": "/home/dev/shop", "userPrompt": "fix the cart", "createdBy": "ext"},
    )
    assert response.status_code == 201
    body = response.json()
    assert body["projectPath"] == "/home/dev/shop"
    assert body["status"] == "active"
    assert body["createdAt"].endswith("Z")
    row = db.execute(
        "SELECT project_path, user_prompt, created_by FROM sessions WHERE id = %s", (body["id"],)
    ).fetchone()
    assert row == ("/home/dev/shop", "fix the cart", "ext")


def test_start_accepts_snake_case(client: TestClient) -> None:
    response = client.post("/api/session/start", json={"project_path": "/p", "id": "snake"})
    assert response.status_code == 201
    assert response.json()["id"] == "snake"


def test_start_same_id_returns_same_session(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    body = {"projectPath": "/p", "id": "abc", "metadata": {"ide": "vscode"}}
    first = client.post("/api/session/start", json=body)
    second = client.post("/api/session/start", json=body)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json() == second.json()
    assert count(db, "sessions") == 1


def test_start_same_id_different_body_is_409(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    client.post("/api/session/start", json={"projectPath": "/p", "id": "abc"})
    response = client.post("/api/session/start", json={"projectPath": "/other", "id": "abc"})
    assert response.status_code == 409
    assert response.json()["error"] == "SessionIdConflict"
    assert db.execute("SELECT project_path FROM sessions").fetchall() == [("/p",)]


def test_start_sanitizes_created_by(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(client, createdBy="bot <private>pin 1234</private>sk-" + "b" * 30)
    rows = db.execute("SELECT created_by FROM sessions WHERE id = %s", (session_id,)).fetchall()
    assert rows == [("bot [REDACTED]",)]


def test_a_created_by_that_redaction_lengthens_still_fits(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # 198 characters sent; "-pab1" becomes "-p[REDACTED]", 205, over the column's 200.
    session_id = make_session(client, createdBy="a" * 185 + "; mysql -pab1")
    rows = db.execute("SELECT created_by FROM sessions WHERE id = %s", (session_id,)).fetchall()
    assert rows == [(("a" * 185 + "; mysql -p[REDACTED]")[:200],)]


def test_start_cleans_prompt_and_metadata(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(
        client,
        userPrompt="deploy with <private>my pin 1234</private> key sk-abcdefghijklmnopqrstuvwx",
        metadata={"api_key": "x", "note\u0000": "ok\u0000"},
    )
    prompt, metadata = db.execute(
        "SELECT user_prompt, metadata FROM sessions WHERE id = %s", (session_id,)
    ).fetchone() or (None, None)
    assert prompt == "deploy with  key [REDACTED]"
    assert metadata == {"api_key": "[REDACTED]", "note": "ok"}


def test_end_marks_ending_and_is_idempotent(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    first = client.post("/api/session/end", json={"sessionId": session_id})
    second = client.post("/api/session/end", json={"sessionId": session_id})
    assert first.status_code == second.status_code == 202
    assert first.json() == {"sessionId": session_id, "status": "ending"}
    assert second.json()["status"] == "ending"
    status, ended_at, next_attempt = db.execute(
        "SELECT status, ended_at, next_attempt_at FROM sessions WHERE id = %s", (session_id,)
    ).fetchone() or (None, None, None)
    assert status == "ending"
    assert ended_at is not None
    assert next_attempt is not None


def test_end_unknown_session_is_404(client: TestClient) -> None:
    response = client.post("/api/session/end", json={"sessionId": "missing"})
    assert response.status_code == 404
    assert response.json()["error"] == "SessionNotFound"


def test_end_of_summarized_session_keeps_status(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    # Ended and summarised (a checkpoint's summary has no end time: its end is a real one,
    # tests/worker/test_unanswered_ends.py).
    ended = "UPDATE sessions SET status = 'summarized', ended_at = now() WHERE id = %s"
    db.execute(ended, (session_id,))
    response = client.post("/api/session/end", json={"sessionId": session_id})
    assert response.status_code == 202
    assert response.json()["status"] == "summarized"


def test_end_after_a_checkpoint_summary_summarises_the_later_work(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    observe(client, session_id, id="before")
    # A checkpoint summary while the session is still at work; the worker then summarises it.
    assert client.post("/api/summarize", json={"sessionId": session_id}).status_code == 202
    summarized = "UPDATE sessions SET status = 'summarized', summarized_at = now() WHERE id = %s"
    db.execute(summarized, (session_id,))

    observe(client, session_id, id="after", functionName="write_file")
    ended = client.post("/api/session/end", json={"sessionId": session_id})

    assert (ended.status_code, ended.json()["status"]) == (202, "ending")  # summarised again
    db.execute(summarized, (session_id,))
    again = client.post("/api/session/end", json={"sessionId": session_id})
    assert again.json()["status"] == "summarized"  # nothing new since: no new summary


def test_list_sessions_newest_first_with_filters(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    for index in range(4):
        make_session(client, id=f"s{index}", projectPath="/a" if index % 2 == 0 else "/b")
        db.execute(
            "UPDATE sessions SET created_at = now() - make_interval(mins => %s) WHERE id = %s",
            (10 - index, f"s{index}"),
        )
    client.post("/api/session/end", json={"sessionId": "s2"})

    everything = client.get("/api/sessions").json()["sessions"]
    assert [s["id"] for s in everything] == ["s3", "s2", "s1", "s0"]
    project_a = client.get("/api/sessions", params={"projectPath": "/a"}).json()["sessions"]
    assert [s["id"] for s in project_a] == ["s2", "s0"]
    # The snake_case spelling, as every body and the memories' queries take it: it was ignored,
    # and the list held every project's sessions.
    snake = client.get("/api/sessions", params={"project_path": "/a"}).json()["sessions"]
    assert [s["id"] for s in snake] == ["s2", "s0"]
    # A camelCase value that cleans to nothing (NUL is removed) gives way, as a blank one does
    # and as the memories' queries do: it listed every project's sessions.
    nul = {"projectPath": "\x00", "project_path": "/a"}
    assert [s["id"] for s in client.get("/api/sessions", params=nul).json()["sessions"]] == [
        "s2",
        "s0",
    ]
    ending = client.get("/api/sessions", params={"status": "ending"}).json()["sessions"]
    assert [s["id"] for s in ending] == ["s2"]
    limited = client.get("/api/sessions", params={"limit": 2}).json()["sessions"]
    assert [s["id"] for s in limited] == ["s3", "s2"]
    before = client.get("/api/sessions", params={"before": everything[1]["createdAt"]})
    assert [s["id"] for s in before.json()["sessions"]] == ["s1", "s0"]


def test_paging_by_the_last_session_misses_none_created_in_the_same_millisecond(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Paged by `before=<epoch ms of the page's last>`, the sessions created in that millisecond
    # but not on the page were skipped; two made in one instant share even the exact time.
    for name in ("a", "b", "c", "d", "e"):
        make_session(client, id=name)
    db.execute(
        "UPDATE sessions SET created_at = CASE WHEN id IN ('b', 'c', 'd') "
        "THEN '2026-03-01T10:00:00.123456Z'::timestamptz "
        "ELSE '2026-03-01T10:00:00.123789Z'::timestamptz END"
    )

    seen: list[str] = []
    page = client.get("/api/sessions", params={"limit": 2}).json()["sessions"]
    while page and len(seen) < 10:  # bounded: a server that ignored the cursor repeated a page
        seen += [s["id"] for s in page]
        params = {"limit": 2, "beforeId": page[-1]["id"]}
        page = client.get("/api/sessions", params=params).json()["sessions"]

    assert seen == ["e", "a", "d", "c", "b"]
    # The snake_case spelling, and `before` beside it, as documented.
    snake = client.get("/api/sessions", params={"before_id": "d"}).json()["sessions"]
    assert [s["id"] for s in snake] == ["c", "b"]
    both = {"beforeId": "a", "before": "2026-03-01T10:00:00.123Z"}
    assert [s["id"] for s in client.get("/api/sessions", params=both).json()["sessions"]] == []
    both["before"] = "2026-03-01T10:00:00.124Z"
    assert [s["id"] for s in client.get("/api/sessions", params=both).json()["sessions"]] == [
        "d",
        "c",
        "b",
    ]
    unknown = client.get("/api/sessions", params={"beforeId": "gone\x00"})
    assert unknown.status_code == 422
    assert unknown.json() == {
        "error": "ValidationFailed",
        "detail": "query: 'beforeId' names no session: 'gone'",
    }


def test_list_sessions_rejects_bad_query(client: TestClient) -> None:
    assert client.get("/api/sessions", params={"status": "bogus"}).status_code == 422
    assert client.get("/api/sessions", params={"limit": 0}).status_code == 422
    assert client.get("/api/sessions", params={"before": "not a time"}).status_code == 422


def test_get_session_with_totals(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(client, userPrompt="hi")
    first = observe(client, session_id)
    observe(client, session_id)
    db.execute(
        "UPDATE observations SET status = 'compressed', tokens_saved = 40 WHERE id = %s",
        (first["id"],),
    )
    body = client.get(f"/api/sessions/{session_id}").json()
    assert body["id"] == session_id
    assert body["status"] == "active"
    assert body["userPrompt"] == "hi"
    assert body["summary"] is None
    assert body["totalObservations"] == 2
    assert body["tokensSaved"] == 40
    assert body["observationCounts"] == {"pending": 1, "captured": 0, "compressed": 1, "failed": 0}


def test_get_unknown_session_is_404(client: TestClient) -> None:
    response = client.get("/api/sessions/nope")
    assert response.status_code == 404
    assert response.json() == {"error": "SessionNotFound", "detail": "no session with id 'nope'"}


def test_summarize_queues_the_session(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(client)
    db.execute(
        "UPDATE sessions SET status = 'summarized', attempts = 3, next_attempt_at = NULL"
        " WHERE id = %s",
        (session_id,),
    )
    response = client.post("/api/summarize", json={"sessionId": session_id})
    assert response.status_code == 202
    assert response.json()["queued"] is True
    row = db.execute(
        "SELECT status, attempts, next_attempt_at <= now() FROM sessions WHERE id = %s",
        (session_id,),
    ).fetchone()
    assert row == ("ending", 0, True)


def test_summarize_unknown_session_is_404(client: TestClient) -> None:
    response = client.post("/api/summarize", json={"sessionId": "nope"})
    assert response.status_code == 404


def test_start_rejects_reserved_excluded_prefix(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    response = client.post("/api/session/start", json={"projectPath": "/p", "id": "excluded-1"})
    assert response.status_code == 422
    assert "reserved" in response.json()["detail"]
    assert count(db, "sessions") == 0


def test_openapi_names_every_success_status_of_the_capture_routes(client: TestClient) -> None:
    expected = {
        "/api/session/start": {"201", "200"},
        "/api/session/end": {"202", "200"},
        "/api/observe": {"201", "200"},
        "/api/observe/result": {"200", "201"},
        "/api/compress": {"202"},
        "/api/summarize": {"202"},
    }
    paths = client.get("/openapi.json").json()["paths"]
    for path, statuses in expected.items():
        answers = paths[path]["post"]["responses"]
        assert {code for code in answers if code.startswith("2")} == statuses, path


def test_a_before_with_more_than_six_fractional_digits_keeps_what_is_before_it(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Times are kept in microseconds; pydantic dropped a 7th digit, so `…06.2970251Z` (.NET's
    # round-trip format writes 7) became `…06.297025Z` and excluded the row created then.
    make_session(client, id="s0")
    db.execute("UPDATE sessions SET created_at = '2026-03-01T10:00:06.297025Z'")
    db.commit()

    def listed(before: str) -> list[str]:
        response = client.get("/api/sessions", params={"before": before})
        assert response.status_code == 200, response.text
        return [s["id"] for s in response.json()["sessions"]]

    assert listed("2026-03-01T10:00:06.2970251Z") == ["s0"]
    assert listed("2026-03-01T10:00:06.297025000001+00:00") == ["s0"]
    assert listed("2026-03-01T10:00:06.2970250Z") == []  # only zeros past the 6th: that time
    assert listed("2026-03-01T10:00:06.297025Z") == []
    assert listed("2026-03-01T10:00:06.9999999Z") == ["s0"]  # carried into the next second
