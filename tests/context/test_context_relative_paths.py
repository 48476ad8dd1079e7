"""A `~` or relative project path reads the key it was stored under, in every context form."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

from tests.search.seed import add_session


def _facts(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["content"] for item in response.json()["items"] if item["source"] == "kv"]


def test_a_tilde_or_relative_project_reads_what_was_stored_under_it(
    client: TestClient, database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The query and the body put a slash before the path (`~/shop` read `/~/shop`), while a
    # memory or a session is stored as sent: the context of such a project was always empty.
    for project in ("~/shop", "shop", "./tools/../shop2"):
        written = client.put(
            "/api/memories/project.stack",
            json={"value": f"stack of {project}", "projectPath": project},
        )
        assert written.status_code in (200, 201), written.text
        by_query = client.get("/api/context", params={"projectPath": project, "format": "json"})
        by_body = client.post("/api/context", json={"projectPath": project, "format": "json"})
        for answer in (by_query, by_body):
            assert any(f"stack of {project}" in fact for fact in _facts(answer)), (
                project,
                answer.text,
            )
    # The path form keeps meaning an absolute path without its slash, but `~` starts no
    # absolute path: `/api/context/~/shop` is the client's `~/shop`, as the query reads it.
    add_session(database_url, "t1", project="~/shop", summary="Tilde summary.")
    assert "Tilde summary." in client.get("/api/context/~/shop").text
    assert "Tilde summary." in client.get("/api/context/%7E%2Fshop").text
    assert "stack of shop" not in client.get("/api/context/shop").text
