"""Scope visibility: session memories stay in their session, global is seen everywhere."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

from tests.memories.helpers import PROJECT, put, url

OTHER = "/home/dev/blog"


def visible_keys(client: TestClient, **params: str) -> list[tuple[str, str]]:
    response = client.get("/api/memories", params=params)
    assert response.status_code == 200, response.text
    return [(m["key"], m["scope"]) for m in response.json()["memories"]]


def test_session_memory_is_invisible_from_another_session(client: TestClient) -> None:
    put(client, "current.step", "writing tests", scope="session", sessionId="s-1")
    mine = client.get(url("current.step"), params={"projectPath": PROJECT, "sessionId": "s-1"})
    assert mine.status_code == 200
    assert mine.json()["sessionId"] == "s-1"
    other = client.get(url("current.step"), params={"projectPath": PROJECT, "sessionId": "s-2"})
    assert other.status_code == 404
    assert client.get(url("current.step"), params={"projectPath": PROJECT}).status_code == 404
    assert visible_keys(client, projectPath=PROJECT, sessionId="s-2") == []
    assert client.delete(url("current.step"), params={"sessionId": "s-2"}).json() == {
        "deleted": False
    }


def test_global_is_visible_everywhere(client: TestClient) -> None:
    put(client, "ai.gemini.style", "terse", scope="global")
    for params in ({}, {"projectPath": PROJECT}, {"projectPath": OTHER, "sessionId": "s-9"}):
        assert client.get(url("ai.gemini.style"), params=params).status_code == 200, params


def test_project_memory_does_not_cross_projects(client: TestClient) -> None:
    put(client, "project.name", "shop")
    assert client.get(url("project.name"), params={"projectPath": OTHER}).status_code == 404
    assert visible_keys(client, projectPath=OTHER) == []


def test_shared_memory_visibility(client: TestClient) -> None:
    put(client, "shared.api_contract", "v2", scope="shared")  # of PROJECT
    put(client, "shared.team", "platform", scope="shared", projectPath=None)  # of nobody
    assert visible_keys(client, projectPath=PROJECT) == [
        ("shared.api_contract", "shared"),
        ("shared.team", "shared"),
    ]
    assert visible_keys(client, projectPath=OTHER) == [("shared.team", "shared")]


def test_most_specific_scope_wins_on_exact_read(client: TestClient) -> None:
    put(client, "current.mode", "global", scope="global")
    put(client, "current.mode", "shared", scope="shared")
    put(client, "current.mode", "project")
    put(client, "current.mode", "session", scope="session", sessionId="s-1")

    def read(**params: str) -> str:
        response = client.get(url("current.mode"), params=params)
        assert response.status_code == 200, response.text
        value: str = response.json()["value"]
        return value

    assert read(projectPath=PROJECT, sessionId="s-1") == "session"
    assert read(projectPath=PROJECT) == "project"
    assert read(projectPath=OTHER) == "global"
    assert read(projectPath=PROJECT, scope="shared") == "shared"
    assert read(projectPath=PROJECT, scope="global") == "global"
    # A list shows every scope's memory under the key, most specific first.
    assert [scope for _, scope in visible_keys(client, projectPath=PROJECT, sessionId="s-1")] == [
        "session",
        "project",
        "shared",
        "global",
    ]
    # Delete removes what a read returns, then the next one shows through.
    client.delete(url("current.mode"), params={"projectPath": PROJECT})
    assert read(projectPath=PROJECT) == "shared"


def test_session_memory_belongs_to_the_project_it_was_written_in(client: TestClient) -> None:
    put(client, "current.step", "shop work", scope="session", sessionId="s-1")
    assert client.get(url("current.step"), params={"sessionId": "s-1"}).status_code == 200
    other = client.get(url("current.step"), params={"projectPath": OTHER, "sessionId": "s-1"})
    assert other.status_code == 404


def test_delete_skips_an_expired_memory_like_a_read_does(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    put(client, "current.mode", "project value", ttl=3600)
    put(client, "current.mode", "global value", scope="global")
    db.execute("UPDATE memories SET expires_at = now() - interval '1 s' WHERE scope = 'project'")
    deleted = client.delete(url("current.mode"), params={"projectPath": PROJECT})
    assert deleted.json() == {"deleted": True}
    assert db.execute("SELECT scope FROM memories").fetchall() == [("project",)]
    assert client.get(url("current.mode"), params={"projectPath": PROJECT}).status_code == 404


def test_a_session_id_in_a_write_without_scope_session_is_a_422_naming_it(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # `{value, projectPath, sessionId}` took the default scope, project, and dropped the session:
    # a note meant for one session reached every agent of the project.
    for body in (
        {"value": "mine", "projectPath": PROJECT, "sessionId": "s-1"},
        {"value": "mine", "projectPath": PROJECT, "session_id": "s-1", "scope": "project"},
        {"value": "mine", "sessionId": "s-1", "scope": "global"},
        {"value": "mine", "projectPath": PROJECT, "sessionId": "s-1", "scope": "shared"},
    ):
        refused = client.put(url("current.step"), json=body)

        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["error"] == "ValidationFailed"
        assert "sessionId names the session of a session memory" in refused.json()["detail"]
    assert visible_keys(client, projectPath=PROJECT) == []
    # A blank or null session id says nothing, as in every other field.
    put(client, "current.step", "project-wide", sessionId=" ")
    put(client, "current.other", "project-wide", sessionId=None)
    assert visible_keys(client, projectPath=PROJECT) == [
        ("current.other", "project"),
        ("current.step", "project"),
    ]
