"""Small builders for memory tests."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi.testclient import TestClient

PROJECT = "/home/dev/shop"


def url(key: str) -> str:
    """The URL of a key, with every reserved character percent-encoded."""
    return f"/api/memories/{quote(key, safe='')}"


def put(client: TestClient, key: str, value: Any, **fields: Any) -> dict[str, Any]:
    """Write a memory (project scope of PROJECT unless told otherwise) and return it."""
    body: dict[str, Any] = {"value": value, "projectPath": PROJECT, **fields}
    response = client.put(url(key), json=body)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, Any] = response.json()
    return answer
