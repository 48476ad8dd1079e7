"""A URL whose percent-encoding is not UTF-8 is a 400, not a key or project of U+FFFD.

The server decoded `%FF` and `%FE` (and a lone surrogate's `%ED%A0%80`) each as U+FFFD, so two
different keys named one memory: `PUT /api/memories/a%FE` replaced the value `PUT a%FF` stored
(the same id, version 2), and a `DELETE` of either removed it.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.errors import BadRequest, InvalidURL


@pytest.mark.parametrize("escaped", ["a%FF", "a%FE", "a%ED%A0%80", "a%C0%AF", "%E9t%E9"])
def test_a_key_that_is_not_utf8_is_refused(
    on_loopback: TestClient, db: psycopg.Connection[Any], escaped: str
) -> None:
    put = on_loopback.put(f"/api/memories/{escaped}", json={"value": 1, "scope": "global"})
    read = on_loopback.get(f"/api/memories/{escaped}")
    deleted = on_loopback.delete(f"/api/memories/{escaped}")

    for answer in (put, read, deleted):
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "InvalidURL"
        assert "UTF-8" in answer.json()["detail"]
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_two_keys_no_longer_meet_in_one_memory(
    on_loopback: TestClient, db: psycopg.Connection[Any]
) -> None:
    on_loopback.put("/api/memories/a%EF%BF%BD", json={"value": "kept", "scope": "global"})
    on_loopback.put("/api/memories/a%FF", json={"value": "other", "scope": "global"})
    on_loopback.delete("/api/memories/a%FE")

    rows = db.execute("SELECT key, value, version FROM memories").fetchall()
    assert rows == [("a\ufffd", "kept", 1)]


def test_a_query_that_is_not_utf8_is_refused(on_loopback: TestClient) -> None:
    answer = on_loopback.get("/api/sessions?projectPath=%2Ftmp%2F%FF")

    assert answer.status_code == 400
    assert answer.json()["error"] == "InvalidURL"


def test_utf8_and_plain_escapes_still_pass(on_loopback: TestClient) -> None:
    put = on_loopback.put(
        "/api/memories/%C3%A9t%C3%A9%2F100%25", json={"value": 1, "scope": "global"}
    )
    listed = on_loopback.get("/api/sessions?projectPath=%2Fhome%2Fd%C3%A9v&limit=5")

    assert put.status_code == 201
    assert put.json()["key"] == "été/100%"
    assert listed.status_code == 200


def test_the_hot_capture_paths_read_no_query_and_answer_as_without_one(
    on_loopback: TestClient,
) -> None:
    # POST /api/observe and /api/observe/result take app/api/hot.py's fast path, past the
    # middleware that refuses such URLs: those two paths are fixed and read no query, so a query
    # that is not UTF-8 changes nothing in what they store or answer.
    started = on_loopback.post("/api/session/start", json={"projectPath": "/home/dev/shop"})
    session_id = started.json()["id"]
    call = {"sessionId": session_id, "functionName": "read_file", "functionArgs": {"p": "a"}}

    observed = on_loopback.post("/api/observe?projectPath=%FF", json=call)
    result = on_loopback.post(
        "/api/observe/result?x=%ED%A0%80",
        json={**call, "result": "ok", "observationId": observed.json()["id"]},
    )

    assert observed.status_code == 201, observed.text
    assert result.status_code in (200, 201), result.text
    stored = on_loopback.get(f"/api/observations/{observed.json()['id']}").json()
    assert (stored["sessionId"], stored["functionName"]) == (session_id, "read_file")
    assert stored["result"] == "ok"


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "/api/observe?x=%FF"),  # a method the route does not take: 405 without the check
        ("POST", "/api/observe/%FF"),  # another path: the full stack, 404 without the check
        ("GET", "/api/no-such-route?x=%FF"),
        ("GET", "/api/sessions?limit=5&unread=%FF"),  # a parameter no route reads
    ],
)
def test_the_check_runs_before_routing_on_the_whole_query(
    on_loopback: TestClient, method: str, url: str
) -> None:
    answer = on_loopback.request(method, url)

    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "InvalidURL"


def test_the_refusal_is_the_error_hierarchys_invalid_url(on_loopback: TestClient) -> None:
    # The middleware answers before any handler; its refusal is still a class of app/errors.py,
    # so the name on the wire cannot drift from the hierarchy's.
    answer = on_loopback.get("/api/sessions?projectPath=%FF")

    assert issubclass(InvalidURL, BadRequest)
    assert answer.status_code == InvalidURL.status_code
    assert answer.json()["error"] == InvalidURL.wire_name
    assert set(answer.json()) == {"error", "detail"}
