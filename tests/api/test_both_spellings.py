"""A body naming one field in both spellings with two values is a 422, not one value dropped.

`{"projectPath": "/a", "project_path": "/b"}` started a session of `/a` and said nothing of `/b`
(pydantic takes the camelCase one), so a client that merged two objects of either style filed its
data under whichever spelling won. The same value twice is no conflict and passes.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

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
