"""A body naming one field in both spellings with two values is a 422, not one value dropped.

`{"projectPath": "/a", "project_path": "/b"}` started a session of `/a` and said nothing of `/b`
(pydantic takes the camelCase one), so a client that merged two objects of either style filed its
data under whichever spelling won. The same value twice is no conflict and passes, nor is a null
or blank spelling, nor two spellings of one project folder (`/a/`, `/a`).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.api.one_value_query import ONE_VALUE_QUERY_NAMES
from tests.api.helpers import refused


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/api/session/start", {"projectPath": "/a", "project_path": "/b"}, "projectPath"),
        (
            "POST",
            "/api/search",
            {"query": "jwt", "projectPath": "/a", "project_path": "/b"},
            "projectPath",
        ),
        (
            "PUT",
            "/api/memories/k",
            {"value": 1, "scope": "global", "createdBy": "a", "created_by": "b"},
            "createdBy",
        ),
        ("POST", "/api/resume", {"projectPath": "/a", "project_path": "/b"}, "projectPath"),
        ("POST", "/api/context", {"projectPath": "/a", "project_path": "/b"}, "projectPath"),
    ],
)
def test_two_values_under_two_spellings_are_refused(
    client: TestClient,
    db: psycopg.Connection[Any],
    method: str,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    detail = refused(client, method, path, body)

    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in field)
    assert f"'{field}' and '{snake}'" in detail
    assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def test_one_value_under_both_spellings_passes(client: TestClient) -> None:
    body = {"projectPath": "/a", "project_path": "/a", "userPrompt": "x", "user_prompt": "x"}

    started = client.post("/api/session/start", json=body)

    assert started.status_code == 201
    assert started.json()["projectPath"] == "/a"


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "/api/sessions?projectPath=/a&project_path=/b"),
        ("GET", "/api/context?projectPath=/a&project_path=/b"),
        ("GET", "/api/memories?projectPath=/a&project_path=/b"),
        ("GET", "/api/memories/k?sessionId=s1&session_id=s2"),
        ("DELETE", "/api/memories/k?scope=project&projectPath=/a&project_path=/b"),
    ],
)
def test_two_values_under_two_spellings_in_a_query_are_refused(
    client: TestClient, db: psycopg.Connection[Any], method: str, url: str
) -> None:
    for project in ("/a", "/b"):
        body = {"value": project, "scope": "project", "projectPath": project}
        assert client.put("/api/memories/k", json=body).status_code == 201

    answer = client.request(method, url)

    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "ValidationFailed"
    assert "name one field and were sent with different values" in answer.json()["detail"]
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (2,)


def test_one_value_under_both_spellings_in_a_query_passes(client: TestClient) -> None:
    listed = client.get("/api/sessions?projectPath=/a/&project_path=/a")
    read = client.get("/api/memories?sessionId=s1&session_id=s1")

    assert listed.status_code == 200
    assert read.status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/session/start", {"projectPath": "/a/", "project_path": "/b"}),
        ("POST", "/api/session/start", {"projectPath": "C:\\x", "project_path": "D:/x"}),
        ("PUT", "/api/memories/k", {"value": 1, "createdBy": " a", "created_by": "b"}),
    ],
)
def test_two_values_stay_refused_once_folded(
    client: TestClient, db: psycopg.Connection[Any], method: str, path: str, body: dict[str, Any]
) -> None:
    refused(client, method, path, body)

    assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


# The rule is the query's (`?projectPath=/a/&project_path=/a` passes): a null or blank spelling
# does not count, and project paths are compared as the stored project is spelt. f4e2872 accepted
# each of these; the first version of the check refused them with a 422.
@pytest.mark.parametrize(
    ("camel", "snake", "stored"),
    [
        ("/a/", "/a", "/a"),
        ("/a", "/a/./", "/a"),
        ("/a", None, "/a"),
        (None, "/a", "/a"),
        ("/a", "", "/a"),
        ("  ", "/a", "/a"),
        ("C:\\x", "c:/x", "C:\\x"),
    ],
)
def test_one_project_under_both_spellings_starts_a_session(
    client: TestClient,
    db: psycopg.Connection[Any],
    camel: str | None,
    snake: str | None,
    stored: str,
) -> None:
    body = {"projectPath": camel, "project_path": snake}

    started = client.post("/api/session/start", json=body)

    assert started.status_code == 201, started.text
    assert started.json()["projectPath"] == stored
    assert db.execute("SELECT project_path FROM sessions").fetchall() == [(stored,)]


@pytest.mark.parametrize(
    ("camel", "snake", "stored"),
    [("/a/", "/a", "/a"), ("/a", None, "/a"), (None, "/a", "/a"), ("c:/x/", "C:\\x", "C:\\x")],
)
def test_one_project_under_both_spellings_writes_and_searches(
    client: TestClient,
    db: psycopg.Connection[Any],
    camel: str | None,
    snake: str | None,
    stored: str,
) -> None:
    spellings = {"projectPath": camel, "project_path": snake}

    written = client.put("/api/memories/k", json={"value": 1, "scope": "project", **spellings})
    searched = client.post("/api/search", json={"query": "k", **spellings})

    assert written.status_code == 201, written.text
    assert searched.status_code == 200, searched.text
    assert db.execute("SELECT project_path FROM memories").fetchall() == [(stored,)]


@pytest.mark.parametrize(
    ("camel", "snake", "stored"),
    [("x", "", "x"), ("x", None, "x"), ("", "x", "x"), (None, "x", "x"), ("x", " x ", "x")],
)
def test_one_author_under_both_spellings_is_stored(
    client: TestClient,
    db: psycopg.Connection[Any],
    camel: str | None,
    snake: str | None,
    stored: str,
) -> None:
    body = {"value": 1, "scope": "global", "createdBy": camel, "created_by": snake}

    written = client.put("/api/memories/k", json=body)

    assert written.status_code == 201, written.text
    assert db.execute("SELECT created_by FROM memories").fetchall() == [(stored,)]


@pytest.mark.parametrize(
    "query",
    [
        "projectPath=/a/&project_path=/a",
        "projectPath=/a&project_path=",
        "projectPath=%20&project_path=/a",
        "projectPath=C:%5Cx&project_path=c:/x/",
    ],
)
def test_one_project_under_both_spellings_in_a_query_passes(client: TestClient, query: str) -> None:
    for project in ("/a", "C:\\x"):
        body = {"value": project, "scope": "project", "projectPath": project}
        assert client.put("/api/memories/k", json=body).status_code == 201

    for url in ("/api/sessions", "/api/context", "/api/memories", "/api/memories/k"):
        answer = client.get(f"{url}?scope=project&{query}")
        assert answer.status_code == 200, (url, answer.text)


# A query may repeat one spelling; FastAPI keeps the last value, so `?projectPath=/a&projectPath=/b`
# deleted `/b`'s memory (200) though the client named `/a` first. Every value of both spellings
# goes through the one rule.
@pytest.mark.parametrize(
    ("method", "url", "field"),
    [
        ("DELETE", "/api/memories/k?scope=project&projectPath=/a&projectPath=/b", "projectPath"),
        ("DELETE", "/api/memories/k?scope=project&project_path=/a&project_path=/b", "project_path"),
        (
            "DELETE",
            "/api/memories/k?scope=project&projectPath=/a&project_path=/a&projectPath=/b",
            "projectPath",
        ),
        ("GET", "/api/memories/k?scope=project&projectPath=/a&projectPath=/b", "projectPath"),
        ("GET", "/api/memories?projectPath=/a&projectPath=/b", "projectPath"),
        ("GET", "/api/sessions?projectPath=/a&projectPath=/b", "projectPath"),
        ("GET", "/api/sessions?project_path=/a&projectPath=/a&project_path=/b", "projectPath"),
        ("GET", "/api/context?projectPath=/a&projectPath=/b", "projectPath"),
        ("GET", "/api/memories/k?sessionId=s1&sessionId=s2", "sessionId"),
        ("GET", "/api/memories/k?session_id=s1&session_id=s2", "session_id"),
        (
            "DELETE",
            "/api/memories/k?scope=session&sessionId=s1&session_id=s1&sessionId=s2",
            "sessionId",
        ),
    ],
)
def test_two_values_under_one_spelling_in_a_query_are_refused(
    client: TestClient, db: psycopg.Connection[Any], method: str, url: str, field: str
) -> None:
    for project in ("/a", "/b"):
        body = {"value": project, "scope": "project", "projectPath": project}
        assert client.put("/api/memories/k", json=body).status_code == 201

    answer = client.request(method, url)

    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "ValidationFailed"
    assert f"'{field}'" in answer.json()["detail"]
    assert "different values" in answer.json()["detail"]
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (2,)


def test_one_value_repeated_in_a_query_passes(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    for project in ("/a", "/b"):
        body = {"value": project, "scope": "project", "projectPath": project}
        assert client.put("/api/memories/k", json=body).status_code == 201

    listed = client.get("/api/sessions?projectPath=/a&projectPath=/a/&project_path=/a")
    read = client.get("/api/memories?sessionId=s1&session_id=s1&sessionId=s1")
    deleted = client.delete(
        "/api/memories/k?scope=project&projectPath=/a&projectPath=&projectPath=/a"
    )

    assert listed.status_code == 200
    assert read.status_code == 200
    assert deleted.status_code == 200, deleted.text
    assert db.execute("SELECT project_path FROM memories").fetchall() == [("/b",)]


def test_an_overlong_project_before_a_blank_one_in_a_query_is_refused(client: TestClient) -> None:
    long = "/" + "x" * 4096

    for url in ("/api/sessions", "/api/context"):
        answer = client.get(f"{url}?projectPath={long}&projectPath=")
        assert answer.status_code == 422, (url, answer.text)
        assert answer.json()["error"] == "ValidationFailed"


# Two spellings that differ only in blanks pass (compared trimmed); which one is kept must not
# hang on their order. It did: `"createdBy": "s", "created_by": "s "` stored "s", the reverse
# "s " (another author). When they differ, the cleaned, trimmed value is kept; when they are
# equal, the value as sent.
@pytest.mark.parametrize(
    ("first", "second", "stored"),
    [("s", "s ", "s"), ("s ", "s", "s"), (" s", "s ", "s"), (" s", " s", " s")],
)
def test_spellings_that_differ_in_blanks_keep_one_value_in_either_order(
    client: TestClient, db: psycopg.Connection[Any], first: str, second: str, stored: str
) -> None:
    body = {
        "projectPath": "/a",
        "createdBy": first,
        "created_by": second,
        "userPrompt": first,
        "user_prompt": second,
    }

    started = client.post("/api/session/start", json=body)

    assert started.status_code == 201, started.text
    rows = db.execute("SELECT created_by, user_prompt FROM sessions").fetchall()
    assert rows == [(stored, stored)]


@pytest.mark.parametrize(
    ("method", "url", "name"),
    [
        ("DELETE", "/api/memories/k?scope=global&scope=project&projectPath=/a", "scope"),
        ("GET", "/api/memories/k?scope=global&projectPath=/a&scope=project", "scope"),
        ("GET", "/api/memories?pattern=k&pattern=*&scope=global", "pattern"),
        ("GET", "/api/memories?limit=1&limit=2", "limit"),
        ("GET", "/api/sessions?status=active&status=summarized", "status"),
        ("GET", "/api/sessions?before=2026-01-01&before=2026-02-01", "before"),
        ("GET", "/api/context/a?budget=60&budget=3000", "budget"),
        ("GET", "/api/context/a?format=json&format=markdown", "format"),
        ("GET", "/api/context?projectPath=/a&prompt=jwt&prompt=billing", "prompt"),
        ("GET", "/api/memories?%73cope=global&scope=project", "scope"),  # the name decoded
        ("GET", "/api/memories/k?history=1&history=0&scope=global", "history"),
    ],
)
def test_two_values_of_any_one_value_parameter_in_a_query_are_refused(
    client: TestClient, db: psycopg.Connection[Any], method: str, url: str, name: str
) -> None:
    # FastAPI keeps a repeated parameter's last value: `DELETE ?scope=global&scope=project`
    # deleted the project's memory though the client named the global one first.
    for scope, project in (("global", None), ("project", "/a")):
        body = {"value": scope, "scope": scope, "projectPath": project}
        assert client.put("/api/memories/k", json=body).status_code == 201

    answer = client.request(method, url)

    assert answer.status_code == 422, answer.text
    assert answer.json() == {
        "error": "ValidationFailed",
        "detail": f"query: '{name}' was sent more than once with different values; send one",
    }
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (2,)


def test_a_repeated_one_value_parameter_with_one_value_and_repeated_tags_pass(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    body = {"value": 1, "scope": "global", "tags": ["a", "b"]}
    assert client.put("/api/memories/k", json=body).status_code == 201

    same = client.get("/api/memories?scope=global&scope=global&limit=5&limit=5")
    tags = client.get("/api/memories?tags=a&tags=b")

    assert same.status_code == 200, same.text
    assert [memory["key"] for memory in same.json()["memories"]] == ["k"]
    assert tags.status_code == 200, tags.text
    assert [memory["key"] for memory in tags.json()["memories"]] == ["k"]


def test_names_no_route_reads_are_ignored_repeated_as_once(client: TestClient) -> None:
    # Only the names a route reads are checked: `?foo=1` alone was ignored, `?foo=1&foo=2` a 422.
    assert client.put("/api/memories/k", json={"value": 1, "scope": "global"}).status_code == 201

    for query in ("foo=1&foo=2", "=1&=2", "scopes=a&scopes=b", "scope=global&scope=glob%61l"):
        answer = client.get(f"/api/memories?{query}")

        assert answer.status_code == 200, (query, answer.text)
        assert [memory["key"] for memory in answer.json()["memories"]] == ["k"]


def test_the_checked_names_are_the_one_value_query_names_the_routes_declare(
    client: TestClient,
) -> None:
    declared = {
        parameter["name"]
        for operation in (
            op for ops in client.app.openapi()["paths"].values() for op in ops.values()
        )
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "query" and "array" not in str(parameter["schema"])
    }

    # The names read in two spellings have their own rule (`query_spelling`), repeats included.
    assert ONE_VALUE_QUERY_NAMES == declared - {"projectPath", "sessionId", "beforeId"}


def test_a_query_value_past_its_bound_is_refused_in_one_wording_wherever_it_comes(
    client: TestClient,
) -> None:
    # Only the last value of a spelling met the declared bound (FastAPI's check, in pydantic's
    # words); an earlier one was refused by hand in words of its own: "'beforeId' must be 1 to
    # 200 characters", "'projectPath' is longer than 4096 characters" (naming the camelCase
    # spelling when the snake_case one was sent).
    session, path = "s" * 201, "/" + "p" * 4096
    answers = {
        "query.beforeId: String should have at most 200 characters": [
            f"/api/sessions?beforeId={session}",
            f"/api/sessions?beforeId={session}&beforeId=%20",
        ],
        "query.before_id: String should have at most 200 characters": [
            f"/api/sessions?before_id={session}&before_id=%20",
        ],
        "query.beforeId: String should have at least 1 character": [
            "/api/sessions?beforeId=&beforeId=s",
        ],
        "query.projectPath: String should have at most 4096 characters": [
            f"/api/sessions?projectPath={path}",
            f"/api/sessions?projectPath={path}&projectPath=",
            f"/api/context?projectPath={path}&projectPath=",
        ],
        "query.project_path: String should have at most 4096 characters": [
            f"/api/sessions?project_path={path}&project_path=",
            f"/api/context?project_path={path}&projectPath=%20",
        ],
    }

    for detail, urls in answers.items():
        for url in urls:
            answer = client.get(url)

            assert answer.status_code == 422, (url[:60], answer.text)
            assert answer.json() == {"error": "ValidationFailed", "detail": detail}, url[:60]
