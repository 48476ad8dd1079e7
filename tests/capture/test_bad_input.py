"""Every bad input gets a clear 4xx in the error shape and leaves nothing half-written."""

from __future__ import annotations

import json
import random
import string
import time
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from tests.capture.builders import count, make_session, observation, observe

ROUTES = [
    "/api/session/start",
    "/api/session/end",
    "/api/observe",
    "/api/observe/result",
    "/api/compress",
    "/api/summarize",
]


@pytest.mark.parametrize("path", ROUTES)
def test_malformed_json_is_400(client: TestClient, path: str) -> None:
    response = client.post(
        path, content=b'{"sessionId": "x",', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "InvalidJSON"


@pytest.mark.parametrize("path", ROUTES)
def test_empty_object_is_422_naming_the_field(client: TestClient, path: str) -> None:
    response = client.post(path, json={})
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "ValidationFailed"
    assert "Field required" in body["detail"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/session/start", {"projectPath": 5}, "projectPath"),
        ("/api/session/start", {"projectPath": ""}, "projectPath"),
        ("/api/session/start", {"projectPath": "/p", "metadata": [1]}, "metadata"),
        ("/api/observe", {"sessionId": ["s"], "functionName": "f"}, "sessionId"),
        ("/api/observe", {"sessionId": "s", "functionName": None}, "functionName"),
        ("/api/observe", {"sessionId": "s", "functionName": "f"}, "functionArgs"),
        ("/api/observe", {"sessionId": "s", "functionName": "f", "timestamp": "soon"}, "timestamp"),
        ("/api/observe", {"sessionId": "s", "functionName": "f", "id": "x" * 201}, "id"),
        ("/api/observe/result", {"sessionId": "s", "functionName": "f"}, "result"),
        ("/api/compress", {"observationId": 12}, "observationId"),
    ],
)
def test_wrong_typed_or_missing_field_is_422(
    client: TestClient, db: psycopg.Connection[Any], path: str, body: dict[str, Any], field: str
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422
    assert field in response.json()["detail"]
    assert count(db, "sessions") == count(db, "observations") == 0


def test_body_that_is_not_an_object_is_422(client: TestClient) -> None:
    assert client.post("/api/observe", json=[1, 2]).status_code == 422
    assert client.post("/api/observe", json="text").status_code == 422


@pytest.mark.parametrize(
    "timestamp",
    [
        -1,
        -1_000_000_000_000,
        # Not named by its value: pytest-xdist's workers must collect the same test ids.
        pytest.param(int(time.time() * 1000) + 2 * 86_400_000, id="in two days"),
        10**18,
    ],
)
def test_absurd_timestamp_is_422(
    client: TestClient, db: psycopg.Connection[Any], timestamp: int
) -> None:
    session_id = make_session(client)
    response = client.post(
        "/api/observe",
        json={
            "sessionId": session_id,
            "functionName": "f",
            "functionArgs": {},
            "timestamp": timestamp,
        },
    )
    assert response.status_code == 422
    assert "timestamp" in response.json()["detail"]
    result = client.post(
        "/api/observe/result",
        json={"sessionId": session_id, "functionName": "f", "result": 1, "timestamp": timestamp},
    )
    assert result.status_code == 422
    assert count(db, "observations") == 0


# A unit mistake (seconds) and a flag are not times: both used to be stored as 1970 times.
IMPLAUSIBLE = [
    (1_764_100_000, "1764100000 ms is 1970-01-21T10:01:40Z", "2025-11-25T19:46:40Z"),
    (946_684_799_999, "before 2000-01-01", "epoch milliseconds"),
    (True, "not a boolean", "epoch milliseconds"),
    (False, "not a boolean", "epoch milliseconds"),
]


@pytest.mark.parametrize(("timestamp", "meaning", "hint"), IMPLAUSIBLE)
def test_implausible_timestamp_is_422_saying_milliseconds_are_expected(
    client: TestClient, db: psycopg.Connection[Any], timestamp: int, meaning: str, hint: str
) -> None:
    session_id = make_session(client)
    call = {"sessionId": session_id, "functionName": "f", "timestamp": timestamp}
    for path, body in (
        ("/api/observe", call | {"functionArgs": {}}),
        ("/api/observe/result", call | {"result": 1}),
    ):
        response = client.post(path, json=body)
        assert response.status_code == 422, response.text
        answer = response.json()
        assert answer["error"] == "ValidationFailed"
        assert answer["detail"].startswith("timestamp: timestamp must be epoch milliseconds")
        assert meaning in answer["detail"]
        assert hint in answer["detail"]
    assert count(db, "observations") == 0


def test_a_timestamp_from_2000_is_stored_as_sent(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    answer = observe(client, make_session(client), timestamp=946_684_800_000)
    row = observation(db, answer["id"])
    assert row["observed_at"].isoformat() == "2000-01-01T00:00:00+00:00"


def test_timestamp_within_a_day_ahead_is_accepted(client: TestClient) -> None:
    session_id = make_session(client)
    soon = int(time.time() * 1000) + 3_600_000
    response = client.post(
        "/api/observe",
        json={"sessionId": session_id, "functionName": "f", "functionArgs": {}, "timestamp": soon},
    )
    assert response.status_code == 201


def test_nul_and_lone_surrogates_are_stored_cleaned(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    raw = (
        '{"projectPath": "/p\\u0000x", "id": "s\\u00001", "userPrompt": "a\\ud800b\\u0000",'
        ' "metadata": {"k\\u0000": "\\udfff"}}'
    )
    response = client.post(
        "/api/session/start", content=raw.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 201
    assert response.json()["id"] == "s1"
    row = db.execute("SELECT project_path, user_prompt, metadata FROM sessions").fetchone()
    assert row == ("/px", "a\ufffdb", {"k": "\ufffd"})

    observe_raw = (
        '{"sessionId": "s1", "functionName": "read\\u0000_file", "id": "o\\u00001",'
        ' "functionArgs": {"path\\u0000": ["\\ud83d", "x\\u0000y", {"deep\\udc00": "\\u0000"}]}}'
    )
    response = client.post(
        "/api/observe", content=observe_raw.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 201
    stored = observation(db, "o1")
    assert stored["function_name"] == "read_file"
    assert stored["function_args"] == {"path": ["\ufffd", "xy", {"deep\ufffd": ""}]}

    result_raw = '{"sessionId": "s1", "functionName": "read_file", "result": "ok\\u0000\\udc00"}'
    response = client.post(
        "/api/observe/result",
        content=result_raw.encode(),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200
    assert observation(db, "o1")["result"] == "ok\ufffd"


def test_invalid_utf8_bytes_are_400_not_500(client: TestClient) -> None:
    response = client.post(
        "/api/observe",
        content=b'{"sessionId": "s", "functionName": "\xff\xfe"}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400


def test_id_of_only_nul_is_422(client: TestClient, db: psycopg.Connection[Any]) -> None:
    response = client.post("/api/session/start", json={"projectPath": "/p", "id": "\u0000"})
    assert response.status_code == 422
    assert count(db, "sessions") == 0


@pytest.mark.parametrize("project", ["   ", "\u0000"])
def test_blank_project_path_is_422(
    client: TestClient, db: psycopg.Connection[Any], project: str
) -> None:
    # It opened a session of the project "": nothing could ever ask for its context.
    response = client.post("/api/session/start", json={"projectPath": project})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("projectPath: must not be blank")
    assert count(db, "sessions") == 0


def test_deeply_nested_args_are_422_and_nothing_stored(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    session_id = make_session(client)
    nested: Any = "leaf"
    for _ in range(100):
        nested = {"a": nested}
    response = client.post(
        "/api/observe",
        json={"sessionId": session_id, "functionName": "f", "functionArgs": nested},
    )
    assert response.status_code == 422
    assert response.json()["error"] == "PayloadTooDeep"
    assert count(db, "observations") == 0


def test_pathologically_nested_json_is_4xx(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(client)
    body = (
        '{"sessionId": "'
        + session_id
        + '", "functionName": "f", "functionArgs": '
        + "[" * 100_000
        + "]" * 100_000
        + "}"
    )
    response = client.post(
        "/api/observe", content=body.encode(), headers={"content-type": "application/json"}
    )
    # In the words every other route uses: it said "maximum recursion depth exceeded while
    # decoding a JSON array from a unicode string", Python's own.
    assert response.status_code == 400
    assert response.json() == {
        "error": "InvalidJSON",
        "detail": "the request body is not valid JSON: it is nested too deeply",
    }
    assert count(db, "observations") == 0


def test_a_number_of_thousands_of_digits_is_400_without_advice_for_the_server(
    client: TestClient,
) -> None:
    session_id = make_session(client)
    body = b'{"sessionId": "%s", "functionName": "f", "functionArgs": {"n": 1%s}}' % (
        session_id.encode(),
        b"0" * 5000,
    )
    response = client.post(
        "/api/observe", content=body, headers={"content-type": "application/json"}
    )

    assert response.status_code == 400
    assert response.json()["detail"].endswith("a number has more than 4300 digits")


def test_a_project_path_too_long_to_index_is_422_naming_it_and_stores_nothing(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Postgres cannot index a row over 2704 bytes: 4000 characters were refused by Postgres, a
    # 503 "database is unreachable" and then a 422 quoting its index (app/api/limits.py).
    path = "/" + "".join(random.Random(1).choices(string.ascii_letters + string.digits, k=4000))

    response = client.post("/api/session/start", json={"projectPath": path})

    assert response.status_code == 422, response.text
    assert response.json() == {
        "error": "ValidationFailed",
        "detail": "projectPath: String should have at most 1024 bytes in UTF-8, not 4001 "
        "(the database indexes it)",
    }
    assert count(db, "sessions") == 0


def test_body_over_the_limit_is_413(client: TestClient, db: psycopg.Connection[Any]) -> None:
    session_id = make_session(client)
    body = json.dumps(
        {"sessionId": session_id, "functionName": "f", "functionArgs": {"x": "a" * 9_000_000}}
    )
    response = client.post(
        "/api/observe", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"] == "PayloadTooLarge"
    assert count(db, "observations") == 0


@pytest.mark.parametrize("path", ["/api/observe", "/api/observe/result"])
@pytest.mark.parametrize(
    ("content_type", "status"),
    [("text/plain", 422), ("application/json; charset=utf-8", 201), ("application/x+json", 201)],
)
def test_hot_routes_read_json_only_when_declared_json(
    client: TestClient, db: psycopg.Connection[Any], path: str, content_type: str, status: int
) -> None:
    session_id = client.post("/api/session/start", json={"projectPath": "/p"}).json()["id"]
    body = {"sessionId": session_id, "functionName": "bash", "functionArgs": {}, "result": "ok"}
    response = client.post(
        path, content=json.dumps(body).encode(), headers={"content-type": content_type}
    )
    assert response.status_code == status, response.text
    if status == 422:
        assert response.json()["error"] == "ValidationFailed"
        assert count(db, "observations") == 0


def test_ids_holding_a_newline_are_reachable_by_their_url(client: TestClient) -> None:
    # A client-chosen id may hold any text; `{id:path}` stopped at a newline, a bare 404.
    session_id = make_session(client, id="tool\ncall/1")
    observed = client.post(
        "/api/observe",
        json={"sessionId": session_id, "functionName": "f", "functionArgs": {}, "id": "o\n1"},
    )
    assert observed.status_code == 201

    session = client.get("/api/sessions/tool%0Acall/1")
    assert session.status_code == 200
    assert session.json()["id"] == "tool\ncall/1"
    assert client.get("/api/observations/o%0A1").json()["sessionId"] == "tool\ncall/1"
    missing = client.get("/api/observations/o%0A2")
    assert (missing.status_code, missing.json()["error"]) == (404, "ObservationNotFound")


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/api/observe", "functionArgs", '{"a": 1e400}'),
        # An integer past 64 bits sent orjson's dump to json's, which wrote `Infinity`: Postgres
        # refused it (422 "the database rejected a value").
        ("/api/observe", "functionArgs", '{"a": 1e400, "b": 123456789012345678901234567890}'),
        ("/api/observe/result", "result", "[-1e309]"),
    ],
)
def test_a_number_past_a_double_is_a_400_not_a_silent_null(
    client: TestClient, db: psycopg.Connection[Any], path: str, field: str, value: str
) -> None:
    # pydantic reads 1e400 as inf, which orjson wrote as null: the number was lost, unsaid.
    session_id = make_session(client)
    raw = f'{{"sessionId": "{session_id}", "functionName": "f", "{field}": {value}}}'
    response = client.post(path, content=raw.encode(), headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    answer = response.json()
    assert answer["error"] == "InvalidJSON"
    assert answer["detail"].startswith(f"{field}: a number is"), answer
    assert count(db, "observations") == 0


def _post(client: TestClient, path: str, raw: str) -> Any:
    return client.post(path, content=raw.encode(), headers={"content-type": "application/json"})


def test_numbers_are_stored_as_sent_in_every_json_field(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # pydantic's and FastAPI's parsers made floats of them: `1e-400` was stored as 0.0 and
    # `1.50` as 1.5, where a memory's PUT keeps them.
    tiny = "0." + "0" * 399 + "1"
    started = _post(
        client,
        "/api/session/start",
        '{"id": "s1", "projectPath": "/home/dev/shop", "metadata": {"v": [1e-400, 1.50]}}',
    )
    assert started.status_code == 201, started.text
    call = (
        '{"sessionId": "s1", "id": "o1", "functionName": "f", '
        '"functionArgs": {"n": [1e-400, 1.50, 0.1]}}'
    )
    assert _post(client, "/api/observe", call).status_code == 201
    # A retry of the same call is the same call (its stored numbers read back as they are).
    retried = _post(client, "/api/observe", call)
    assert retried.status_code == 200, retried.text
    result = (
        '{"sessionId": "s1", "observationId": "o1", "functionName": "f", "result": [2.50, 1e-400]}'
    )
    assert _post(client, "/api/observe/result", result).status_code == 200
    # One sent as snake_case too, and one with a lone surrogate (the parse's slow path).
    other = (
        '{"session_id": "s1", "id": "o2", "function_name": "f\\ud800", '
        '"function_args": {"n": 1.50}}'
    )
    assert _post(client, "/api/observe", other).status_code == 201
    rows = db.execute(
        "SELECT id, function_args::text, result::text FROM observations ORDER BY id"
    ).fetchall()
    assert rows == [
        ("o1", f'{{"n": [{tiny}, 1.50, 0.1]}}', f"[2.50, {tiny}]"),
        ("o2", '{"n": 1.50}', None),
    ]
    metadata = db.execute("SELECT metadata::text FROM sessions WHERE id = 's1'").fetchone()
    assert metadata == (f'{{"v": [{tiny}, 1.50]}}',)


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/api/observe", "functionArgs", '{"a": 1e-999999}'),
        ("/api/observe/result", "result", "[0.5, 1e-20000]"),
    ],
)
def test_a_number_the_database_cannot_keep_is_a_400_not_a_silent_zero(
    client: TestClient, db: psycopg.Connection[Any], path: str, field: str, value: str
) -> None:
    session_id = make_session(client)
    raw = f'{{"sessionId": "{session_id}", "functionName": "f", "{field}": {value}}}'
    response = _post(client, path, raw)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "InvalidJSON"
    assert response.json()["detail"].startswith(f"{field}: a number is written with"), response.text
    assert count(db, "observations") == 0
