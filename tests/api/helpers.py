"""Small helpers for tests of the API's refusals."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient


def refused(client: TestClient, method: str, path: str, body: dict[str, Any]) -> str:
    """Send `body`; it must be a 422 `ValidationFailed`, whose detail is returned."""
    response = client.request(method, path, json=body)
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["error"] == "ValidationFailed"
    detail: str = answer["detail"]
    return detail
