"""The memories' `?projectPath=` and `?sessionId=` bounded as the PUT body's fields are."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

# Each spelling, its bound (the body's: 4,096 characters of path, 200 of session id).
BOUNDED = [
    ("projectPath", 4096),
    ("project_path", 4096),
    ("sessionId", 200),
    ("session_id", 200),
]
READS = [("GET", "/api/memories"), ("GET", "/api/memories/k"), ("DELETE", "/api/memories/k")]


def test_a_query_value_past_the_bodys_bound_is_a_422(
    client: TestClient, db: psycopg.Connection[Any]
) -> None:
    # rev-structure27: the PUT body bounds them, the queries did not (any length was cleaned,
    # folded and looked up).
    for name, bound in BOUNDED:
        for method, url in READS:
            fits = client.request(method, url, params={name: "/" + "a" * (bound - 1)})
            over = client.request(method, url, params={name: "/" + "a" * bound})

            assert fits.status_code != 422, (name, method, url, fits.text)
            assert over.status_code == 422, (name, method, url, over.text)
            assert over.json() == {
                "error": "ValidationFailed",
                "detail": f"query.{name}: String should have at most {bound} characters",
            }, (name, method, url)


def test_the_schema_shows_no_new_bound(client: TestClient) -> None:
    # Bounded in the dependency: the parameters' schema is as clients generated it from.
    operations = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    for path, method in [("/api/memories", "get"), ("/api/memories/{key}", "get")]:
        parameters = {p["name"]: p for p in operations[path][method]["parameters"]}
        for name in ("projectPath", "sessionId"):
            assert "maxLength" not in str(parameters[name]["schema"]), (path, name)
