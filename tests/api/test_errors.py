"""Every error, ours or the framework's, has the shape {"error", "detail"}."""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import structlog
from fastapi import APIRouter
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs

from app.api import errors as api_errors
from app.api import outage_log
from app.api.deps import DbDep
from app.errors import NotFound
from app.logs import configure_logging
from app.main import create_app
from tests.conftest import make_settings
from tests.error_names import assert_named_by_its_class


class Probe(BaseModel):
    name: str
    count: int


probe_router = APIRouter()


@probe_router.post("/api/probe")
async def probe(body: Probe) -> dict[str, Any]:
    if body.name == "missing":
        raise NotFound("no probe called missing")
    return body.model_dump()


@probe_router.get("/api/boom")
async def boom() -> None:
    raise RuntimeError("bug")


@probe_router.post("/api/too-long")
async def too_long(db: DbDep) -> None:
    # A value no request bound stops (app/api/limits.py) that Postgres cannot index.
    noise = "".join(random.Random(1).choices(string.ascii_letters, k=4000))
    await db.execute(text("INSERT INTO sync_runs (project_path) VALUES (:p)"), {"p": noise})


@probe_router.post("/api/twice")
async def twice(db: DbDep) -> None:
    # A key Postgres itself finds taken: the integrity error's path, not a domain Conflict.
    await db.execute(text("CREATE TEMP TABLE twice (k int PRIMARY KEY)"))
    await db.execute(text("INSERT INTO twice VALUES (1), (1)"))


@pytest.fixture
def probe_client(database_url: str, tmp_path: Any) -> Iterator[TestClient]:
    app = create_app(make_settings(home=tmp_path), database_url=database_url)
    app.include_router(probe_router)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_unknown_route_is_404_in_shape(probe_client: TestClient) -> None:
    response = probe_client.get("/api/nowhere")

    assert response.status_code == 404
    assert response.json() == {"error": "NotFound", "detail": "Not Found"}


def test_a_value_postgres_cannot_index_is_422_quoting_it(probe_client: TestClient) -> None:
    # The fallback for a value no request bound stops: psycopg classes Postgres's "index row
    # size ... exceeds" (SQLSTATE 54000) with an unreachable database's errors (a 503 before).
    response = probe_client.post("/api/too-long")

    assert response.status_code == 422, response.text
    assert response.json()["error"] == "InvalidData"
    assert "index row size" in response.json()["detail"]


def test_wrong_method_is_405_in_shape(probe_client: TestClient) -> None:
    response = probe_client.get("/api/probe")

    assert response.status_code == 405
    assert response.json()["error"] == "MethodNotAllowed"


def test_malformed_json_is_400(probe_client: TestClient) -> None:
    response = probe_client.post(
        "/api/probe", content=b'{"name": "x",', headers={"content-type": "application/json"}
    )

    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "InvalidJSON"
    assert body["detail"].startswith("the request body is not valid JSON")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"name": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
        (b'{"name": "\xff\xfe caf\xe9"}', "not UTF-8"),
        # Python's int() refuses more than 4300 digits; its message named a function to call.
        (b'{"name": "x", "count": 1' + b"0" * 5000 + b"}", "a number has more than 4300 digits"),
    ],
)
def test_bodies_json_cannot_decode_are_invalid_json(
    probe_client: TestClient, body: bytes, reason: str
) -> None:
    # FastAPI answers these with a vague 400 "There was an error parsing the body".
    response = probe_client.post(
        "/api/probe", content=body, headers={"content-type": "application/json"}
    )

    assert response.status_code == 400
    assert response.json()["error"] == "InvalidJSON"
    assert reason in response.json()["detail"]


def test_missing_and_wrong_typed_fields_are_422_naming_them(probe_client: TestClient) -> None:
    response = probe_client.post("/api/probe", json={"count": "many"})

    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "ValidationFailed"
    assert "name: Field required" in body["detail"]
    assert "count: Input should be a valid integer" in body["detail"]


def test_a_wrong_typed_field_names_the_json_kind_sent(probe_client: TestClient) -> None:
    # "name: Input should be a valid string" did not say that the client had sent a null.
    response = probe_client.post("/api/probe", json={"name": None, "count": [1]})

    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "name: Input should be a valid string, not null" in detail
    assert "count: Input should be a valid integer, not an array" in detail


def test_domain_errors_render_their_class_name(probe_client: TestClient) -> None:
    response = probe_client.post("/api/probe", json={"name": "missing", "count": 1})

    assert response.status_code == 404
    assert response.json() == {"error": "NotFound", "detail": "no probe called missing"}


def test_a_bug_is_a_500_in_shape_without_internals(probe_client: TestClient) -> None:
    response = probe_client.get("/api/boom")

    assert response.status_code == 500
    assert response.json() == {
        "error": "InternalError",
        "detail": "an unexpected error occurred; it has been logged",
    }


def test_a_bug_answered_to_an_allowed_origin_carries_its_cors_headers(
    probe_client: TestClient,
) -> None:
    # The 500 left without them: the extension's fetch saw an opaque network failure instead of
    # the error's shape.
    origin = "chrome-extension://abcdefghijklmnop"
    response = probe_client.get("/api/boom", headers={"Origin": origin})

    assert response.status_code == 500
    assert response.json()["error"] == "InternalError"
    assert response.headers["access-control-allow-origin"] == origin
    assert response.headers["vary"] == "Origin"


def test_openapi_docs_are_served(probe_client: TestClient) -> None:
    assert probe_client.get("/docs").status_code == 200
    assert probe_client.get("/openapi.json").json()["info"]["title"] == "antigravity-mem"


@pytest.mark.parametrize("path", ["/api/probe", "/api/session/start", "/api/observe"])
@pytest.mark.parametrize(
    ("content_type", "sent"),
    [
        # `curl -d '{...}'` without -H: the body is JSON, its declared type is a form's.
        ("application/x-www-form-urlencoded", "Content-Type 'application/x-www-form-urlencoded'"),
        ("text/plain", "Content-Type 'text/plain'"),
    ],
)
def test_a_json_body_sent_under_another_type_says_which_header_to_send(
    probe_client: TestClient, path: str, content_type: str, sent: str
) -> None:
    response = probe_client.post(
        path, content=b'{"name": "x", "count": 1}', headers={"Content-Type": content_type}
    )

    assert response.status_code == 422
    assert response.json() == {
        "error": "ValidationFailed",
        "detail": "send the body as JSON with 'Content-Type: application/json' "
        f"(this request had {sent})",
    }


@pytest.mark.parametrize("path", ["/api/probe", "/api/session/start", "/api/observe"])
@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"[1, 2]", "the request body must be a JSON object, not an array"),
        (b'"text"', "the request body must be a JSON object, not a string"),
        (b"3", "the request body must be a JSON object, not a number"),
        (b"true", "the request body must be a JSON object, not a boolean"),
        (b"null", "the request body must be a JSON object, not null"),
    ],
)
def test_a_json_body_that_is_not_an_object_is_named(
    probe_client: TestClient, path: str, body: bytes, detail: str
) -> None:
    response = probe_client.post(path, content=body, headers={"Content-Type": "application/json"})

    assert response.status_code == 422
    assert response.json() == {"error": "ValidationFailed", "detail": detail}


@pytest.mark.parametrize(
    "path", ["/api/probe", "/api/session/start", "/api/observe", "/api/observe/result"]
)
def test_a_body_without_content_type_is_refused_on_every_route(
    probe_client: TestClient, db: psycopg.Connection[Any], path: str
) -> None:
    # What a web page's fetch() with a Blob body sends to 127.0.0.1, with no preflight: capture's
    # two hot routes parsed it as JSON and stored the call.
    probe_client.post("/api/session/start", json={"projectPath": "/home/dev/shop", "id": "s1"})
    body = b'{"sessionId": "s1", "functionName": "read_file", "functionArgs": {}, "result": "x"}'
    response = probe_client.post(path, content=body)

    assert response.status_code == 422
    assert response.json() == {
        "error": "ValidationFailed",
        "detail": "send the body as JSON with 'Content-Type: application/json' "
        "(this request had no Content-Type)",
    }
    assert db.execute("SELECT count(*) FROM observations").fetchone() == (0,)


@pytest.mark.parametrize("path", ["/api/probe", "/api/observe", "/api/observe/result"])
def test_an_empty_body_is_named(probe_client: TestClient, path: str) -> None:
    # The capture routes, which parse their bodies themselves, said `400 InvalidJSON: Expecting
    # value: line 1 column 1 (char 0)` where every other route names the empty body.
    response = probe_client.post(path, headers={"Content-Type": "application/json"})

    assert response.status_code == 422
    assert response.json() == {
        "error": "ValidationFailed",
        "detail": "the request body is empty; send a JSON object",
    }


@pytest.mark.parametrize(
    ("setting", "detail"),
    [
        (
            "lock_timeout=100ms",
            "a row the request needs is locked by another change; retry shortly",
        ),
        (
            "statement_timeout=100ms",
            "the database cancelled the statement (a timeout, or an operator); retry shortly",
        ),
    ],
)
def test_a_database_that_answers_is_not_called_unreachable(
    setting: str, detail: str, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # A team's server may set lock or statement timeouts on its role. A request they stopped was
    # a 503 "the database is unreachable", which sent an operator looking for a network problem.
    url = make_url(database_url).update_query_dict({"options": f"-c {setting}"})
    app = create_app(make_settings(), database_url=url.render_as_string(hide_password=False))
    memory = "/api/memories/project.owner"
    with TestClient(app, raise_server_exceptions=False) as client:
        body = {"value": "ana", "scope": "project", "projectPath": "/p"}
        assert client.put(memory, json=body).status_code == 201
        with db.transaction():
            db.execute("SELECT 1 FROM memories WHERE key = 'project.owner' FOR UPDATE")
            response = client.put(memory, json={**body, "value": "bo"})

    assert response.status_code == 503, response.text
    assert response.json() == {"error": "DatabaseUnavailable", "detail": detail}
    assert response.headers["retry-after"] == "5"
    assert db.execute("SELECT value FROM memories").fetchall() == [("ana",)]


def test_every_error_the_api_sends_is_named_by_its_class(database_url: str, tmp_path: Any) -> None:
    # A name written as a string in one handler (the framework's errors, a database's refusals,
    # a bug's 500) drifted from app/errors.py's on a rename; each path here is a real refusal.
    settings = make_settings(home=tmp_path, api_token="s3cret", max_body_bytes=2048)
    app = create_app(settings, database_url=database_url)
    app.include_router(probe_router)
    token = {"Authorization": "Bearer s3cret"}
    with TestClient(app, raise_server_exceptions=False, headers=token) as client:
        answers = [
            client.get("/api/nowhere"),
            client.get("/api/probe"),
            client.post("/api/probe", content=b"{", headers={"Content-Type": "application/json"}),
            client.post(
                "/api/probe", content=b"[" * 1500, headers={"Content-Type": "application/json"}
            ),
            client.post("/api/probe", json={"count": "many"}),
            client.post("/api/probe", json={"name": "missing", "count": 1}),
            client.post("/api/probe", content=b"x" * 4096),
            client.post("/api/too-long"),
            client.post("/api/twice"),
            client.get("/api/boom"),
            client.get("/api/sessions", headers={"Authorization": "Bearer nope"}),
        ]

    for answer in answers:
        assert_named_by_its_class(answer.status_code, answer.json())
    statuses = [answer.status_code for answer in answers]
    assert statuses == [404, 405, 400, 400, 422, 404, 413, 422, 409, 500, 401]
    # The names API.md's clients read: a class renamed renames them on every surface at once.
    assert [answer.json()["error"] for answer in answers] == [
        "NotFound",
        "MethodNotAllowed",
        "InvalidJSON",
        "InvalidJSON",
        "ValidationFailed",
        "NotFound",
        "PayloadTooLarge",
        "InvalidData",
        "Conflict",
        "InternalError",
        "Unauthorized",
    ]


@pytest.mark.parametrize(
    ("state", "detail"),
    [
        (
            "XX001",
            "the database failed inside (a damaged or unwritable file, a full or failing disk: "
            "see its log); retry once it is repaired",
        ),
        (
            "XX002",
            "the database failed inside (a damaged index: see its log); retry once it is repaired",
        ),
        (
            "58030",
            "the database could not read or write its files (see its log); retry once it is "
            "repaired",
        ),
    ],
)
def test_a_database_failing_inside_is_a_503_that_says_so(
    state: str, detail: str, client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Postgres's internal errors (class XX: "could not extend file ... File too large", a damaged
    # page) were a 500 with two tracebacks, the keep-alive connection closed; its I/O errors
    # (class 58) a 503 saying the database was unreachable, though it had answered.
    db.execute(
        "CREATE FUNCTION fail_inside() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN RAISE EXCEPTION 'could not extend file' USING ERRCODE = '{state}'; END $$"
    )
    db.execute(
        "CREATE TRIGGER fail_inside BEFORE INSERT ON sessions "
        "FOR EACH ROW EXECUTE FUNCTION fail_inside()"
    )
    try:
        started = client.post("/api/session/start", json={"projectPath": "/p"})
        written = client.put("/api/memories/k", json={"value": 1, "scope": "global"})
    finally:
        db.execute("DROP TRIGGER fail_inside ON sessions")
        db.execute("DROP FUNCTION fail_inside()")

    assert started.status_code == 503, started.text
    assert started.json() == {"error": "DatabaseUnavailable", "detail": detail}
    assert started.headers["retry-after"]
    assert written.status_code == 201  # the database serves what does not meet the failure


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    # A logger keeps the configuration of its first use: a fresh one, so capture_logs sees it.
    configure_logging("info")
    monkeypatch.setattr(api_errors, "log", structlog.get_logger(api_errors.__name__))
    monkeypatch.setattr(outage_log, "log", structlog.get_logger("app.api.errors"))
    monkeypatch.setattr(outage_log.OUTAGE_LOG, "windows", {})
    with capture_logs() as entries:
        yield entries


def test_a_fault_inside_the_database_is_a_500_logged_every_time(
    client: TestClient, db: psycopg.Connection[Any], logged: list[dict[str, Any]]
) -> None:
    # XX000 (`elog(ERROR)`: "cache lookup failed") fails the same way on every retry: it was a
    # 503 inviting retries, logged once a window as a quiet warning without its traceback.
    db.execute(
        "CREATE FUNCTION fail_inside() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'cache lookup failed for type 0' USING ERRCODE = 'XX000'; "
        "END $$"
    )
    db.execute(
        "CREATE TRIGGER fail_inside BEFORE INSERT ON sessions "
        "FOR EACH ROW EXECUTE FUNCTION fail_inside()"
    )
    try:
        answers = [client.post("/api/session/start", json={"projectPath": "/p"}) for _ in range(3)]
    finally:
        db.execute("DROP TRIGGER fail_inside ON sessions")
        db.execute("DROP FUNCTION fail_inside()")

    for answer in answers:
        assert answer.status_code == 500, answer.text
        assert answer.json() == {
            "error": "InternalError",
            "detail": "an unexpected error occurred; it has been logged",
        }
        assert "retry-after" not in answer.headers
    failures = [entry for entry in logged if entry["log_level"] in ("error", "warning")]
    assert [entry["event"] for entry in failures] == ["request.failed"] * 3
    assert all(entry["log_level"] == "error" and entry["exc_info"] for entry in failures)
