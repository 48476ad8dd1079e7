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
