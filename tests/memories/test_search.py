"""Memories are written into the one search index as `key: value`, source kv."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

from tests.memories.helpers import PROJECT, put, url


def search(client: TestClient, query: str, **extra: Any) -> list[dict[str, Any]]:
    body = {"query": query, "projectPath": PROJECT, **extra}
    response = client.post("/api/search", json=body)
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def test_search_finds_a_kv_memory(client: TestClient) -> None:
    put(client, "discovered.gotchas", {"auth": "refresh tokens rotate on every request"})
    results = search(client, "refresh tokens rotate", sources=["kv"])
    assert results[0]["source"] == "kv"
    assert results[0]["content"] == (
        'discovered.gotchas: {"auth": "refresh tokens rotate on every request"}'
    )


def test_update_replaces_and_delete_removes_index_rows(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    put(client, "current.task", "migrate billing to stripe")
    put(client, "current.task", "write onboarding emails")
    assert search(client, "stripe billing", sources=["kv"], mode="keyword") == []
    found = search(client, "onboarding emails", sources=["kv"], mode="keyword")
    assert [hit["content"] for hit in found] == ["current.task: write onboarding emails"]
    client.delete(url("current.task"), params={"projectPath": PROJECT})
    assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == (0,)


def test_huge_value_is_cut_in_the_index_not_in_storage(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    value = "token " * 100_000
    put(client, "discovered.log", value)
    got = client.get(url("discovered.log"), params={"projectPath": PROJECT}).json()
    assert got["value"] == value
    (length,) = db.execute("SELECT length(content) FROM memory_chunks").fetchone() or (0,)
    assert length == 4000


def test_a_session_memory_is_in_no_other_session_s_search_or_context(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Visible to session sess-a only; search and the context block name no reader session.
    put(
        client,
        "ai.claude.scratch",
        "zanzibar credentials rotation",
        scope="session",
        sessionId="sess-a",
    )
    put(client, "project.stack", "zanzibar api in go")

    found = search(client, "zanzibar", mode="keyword")
    context = client.get(
        "/api/context", params={"projectPath": PROJECT, "prompt": "zanzibar", "format": "json"}
    ).json()

    assert [hit["content"] for hit in found] == ["project.stack: zanzibar api in go"]
    assert "credentials rotation" not in context["context"]
    assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == (1,)
    other = client.get(
        url("ai.claude.scratch"), params={"projectPath": PROJECT, "sessionId": "sess-b"}
    )
    assert other.status_code == 404  # as a read by key has always answered


def test_an_expired_memory_is_out_of_search_and_context_before_its_purge(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    put(client, "discovered.window", "quokka deploy window is open", ttl=60)
    put(client, "discovered.rule", "quokka deploys need a review")
    # Expired, and not purged yet (the worker's sweep runs every minute, and not at all without
    # a worker): its index row is still there.
    db.execute("UPDATE memories SET expires_at = now() - interval '1 second' WHERE ttl = 60")

    found = search(client, "quokka deploy window", mode="hybrid", limit=5)
    context = client.get(
        "/api/context", params={"projectPath": PROJECT, "prompt": "quokka deploy window"}
    ).text

    assert [hit["content"] for hit in found] == ["discovered.rule: quokka deploys need a review"]
    assert "window is open" not in context
    assert "quokka deploys need a review" in context
    assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == (2,)
