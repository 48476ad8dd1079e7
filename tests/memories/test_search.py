"""Memories are written into the one search index as `key: value`, source kv."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.ext.asyncio import AsyncSession

from app.index.embedding import embed_pending_chunks
from app.llm.embeddings import local_embedder
from tests.memories.helpers import PROJECT, put, url
from tests.search.seed import in_session

OTHER = "/home/dev/blog"


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


def _embed_index(database_url: str) -> None:
    async def work(session: AsyncSession) -> None:
        while (await embed_pending_chunks(session, local_embedder())).chunks:
            pass

    in_session(database_url, work)


def _write_every_scope(client: TestClient) -> None:
    put(client, "ai.style", "wombat answers stay terse", scope="global")
    put(client, "shared.team", "wombat platform team", scope="shared", projectPath=None)
    put(client, "shared.contract", "wombat api contract v2", scope="shared")
    put(client, "project.db", "wombat postgres sixteen")
    put(client, "project.db", "wombat sqlite in blog", projectPath=OTHER)
    put(client, "shared.blog", "wombat blog handoff", scope="shared", projectPath=OTHER)
    put(client, "ai.scratch", "wombat session scratch", scope="session", sessionId="s-1")


VISIBLE_TO_PROJECT = {
    "ai.style: wombat answers stay terse",
    "shared.team: wombat platform team",
    "shared.contract: wombat api contract v2",
    "project.db: wombat postgres sixteen",
}


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_a_project_search_sees_what_a_read_for_the_project_sees(
    client: TestClient, database_url: str, mode: str
) -> None:
    # A read by key for PROJECT resolves global and shared memories; search and context did not
    # (they are indexed under the empty project), in both branches alike.
    _write_every_scope(client)
    _embed_index(database_url)

    found = {hit["content"] for hit in search(client, "wombat", mode=mode, limit=20)}

    assert found == VISIBLE_TO_PROJECT
    blog = {
        hit["content"] for hit in search(client, "wombat", mode=mode, limit=20, projectPath=OTHER)
    }
    assert blog == {
        "ai.style: wombat answers stay terse",
        "shared.team: wombat platform team",
        "project.db: wombat sqlite in blog",
        "shared.blog: wombat blog handoff",
    }


def test_a_project_context_shows_global_and_shared_memories_the_prompt_finds(
    client: TestClient, database_url: str
) -> None:
    _write_every_scope(client)
    _embed_index(database_url)

    context = client.get(
        "/api/context", params={"projectPath": PROJECT, "prompt": "wombat", "format": "json"}
    ).json()["context"]

    for text in VISIBLE_TO_PROJECT:
        assert text.split(": ")[1] in context, text  # a hit or a fact line
    for hidden in ("sqlite in blog", "blog handoff", "session scratch"):
        assert hidden not in context


def test_a_session_memory_s_index_row_from_before_walk10_is_in_no_search(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # Before walk10 session memories were indexed, a project-less one under the empty project,
    # which every project's search now includes: such a leftover row must not be served.
    put(client, "ai.scratch", "numbat private scratch", scope="session", sessionId="s-1")
    put(client, "ai.note", "numbat own note", scope="session", sessionId="s-2", projectPath=None)
    db.execute(
        "INSERT INTO memory_chunks (project_path, source, memory_id, content, hash) "
        "SELECT project_path, 'kv', id, key || ': ' || (value #>> '{}'), md5(key) FROM memories"
    )

    assert search(client, "numbat", mode="keyword") == []
    assert search(client, "numbat", mode="keyword", projectPath=None) == []
