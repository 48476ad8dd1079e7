"""Memory lists (`GET /api/memories`, a wildcard GET) page by cursor and say if more exist."""

from __future__ import annotations

import base64
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from tests.memories.helpers import PROJECT, put, url


def _walk(client: TestClient, path: str, **params: Any) -> tuple[list[tuple[str, str]], int]:
    """Every memory a listing pages through (key, scope), and how many pages it took."""
    seen: list[tuple[str, str]] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = {**params, **({"cursor": cursor} if cursor is not None else {})}
        response = client.get(path, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        pages += 1
        seen += [(m["key"], m["scope"]) for m in body["memories"]]
        assert body["hasMore"] is (body["nextCursor"] is not None), body
        if not body["hasMore"]:
            return seen, pages
        cursor = body["nextCursor"]
        assert pages < 20


def test_a_memory_list_pages_through_every_memory_once(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # A listing stopped at `limit` (at most 1000) with no way to the rest and no sign of it.
    for key in ("t.a", "t.b", "t.c", "t.d", "t.e"):
        put(client, key, key)
    put(client, "t.b", "global too", scope="global")  # one key in two scopes, split by a page
    everything = [
        ("t.a", "project"),
        ("t.b", "project"),
        ("t.b", "global"),
        ("t.c", "project"),
        ("t.d", "project"),
        ("t.e", "project"),
    ]

    for limit in (1, 2, 4, 6, 100):
        listed, pages = _walk(client, "/api/memories", projectPath=PROJECT, limit=limit)
        assert listed == everything, limit
        assert pages == -(-len(everything) // limit), limit  # a full last page says no more
        by_pattern, _ = _walk(client, url("t.*"), projectPath=PROJECT, limit=limit)
        assert by_pattern == everything, limit


def test_a_cursor_holds_across_a_write_and_a_delete_and_a_bad_one_is_a_422(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    for key in ("t.a", "t.b", "t.c"):
        put(client, key, key)
    first = client.get("/api/memories", params={"projectPath": PROJECT, "limit": 2}).json()
    assert [m["key"] for m in first["memories"]] == ["t.a", "t.b"]
    client.delete(url("t.b"), params={"projectPath": PROJECT})
    put(client, "t.aa", "before the cursor")
    put(client, "t.d", "after it")
    rest = client.get(
        "/api/memories", params={"projectPath": PROJECT, "cursor": first["nextCursor"]}
    ).json()
    assert [m["key"] for m in rest["memories"]] == ["t.c", "t.d"]
    assert rest["hasMore"] is False
    forged = (
        # JSON's `true` as the rank, a lone surrogate as the key, thousands of nested brackets:
        # each was a 500 (rev-api28).
        '["t.a", true, "00000000-0000-0000-0000-000000000000"]',
        '["\\ud800", 1, "00000000-0000-0000-0000-000000000000"]',
        "[" * 6000,
    )
    encoded = [base64.urlsafe_b64encode(text.encode()).decode().rstrip("=") for text in forged]
    for bad in ("x", "", "e30", "W1tdXQ", "!!!", *encoded):
        refused = client.get("/api/memories", params={"projectPath": PROJECT, "cursor": bad})
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["error"] == "ValidationFailed"
        assert "cursor" in refused.json()["detail"]
