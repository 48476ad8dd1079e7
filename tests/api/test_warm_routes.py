"""`agmem serve`'s app resolves its routes in its lifespan, so that the first request on a route
does not pay for it (FastAPI 0.165 builds an included router's routes, their dependants, on the
router's first request). Observed through FastAPI's own `get_dependant`, which resolving a route
calls."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import fastapi.routing
import psycopg
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.conftest import make_settings

PROJECT = "/tmp/warm-project"


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the dependants FastAPI builds from here on."""
    paths: list[str] = []
    build = fastapi.routing.get_dependant

    def counted(*, path: str, call: Callable[..., Any], **rest: Any) -> Any:
        paths.append(path)
        return build(path=path, call=call, **rest)

    monkeypatch.setattr(fastapi.routing, "get_dependant", counted)
    return paths


def _served(database_url: str, home: Any, *, warm_routes: bool) -> TestClient:
    settings = make_settings(home=home)
    return TestClient(create_app(settings, database_url=database_url, warm_routes=warm_routes))


def _first_requests(client: TestClient) -> Iterator[int]:
    session = client.post("/api/session/start", json={"projectPath": PROJECT})
    yield session.status_code
    call = {"sessionId": session.json()["id"], "id": "c1", "functionName": "read_file"}
    yield client.post("/api/observe", json={**call, "functionArgs": {"path": "a"}}).status_code
    result = {**call, "observationId": "c1", "result": "ok"}
    del result["id"]
    yield client.post("/api/observe/result", json=result).status_code
    yield client.post("/api/search", json={"query": "deploy", "projectPath": PROJECT}).status_code
    yield client.get("/api/context", params={"projectPath": PROJECT}).status_code
    yield client.get("/health").status_code


def test_the_served_app_resolves_its_routes_before_its_first_request(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any, resolved: list[str]
) -> None:
    with _served(database_url, tmp_path, warm_routes=True) as client:
        assert "/api/session/start" in resolved  # in the lifespan, before any request
        assert "/api/search" in resolved
        resolved.clear()
        assert list(_first_requests(client)) == [201, 201, 200, 200, 200, 200]
        assert resolved == []


def test_an_app_not_served_leaves_its_routes_to_their_first_request(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Any, resolved: list[str]
) -> None:
    """Tests build thousands of apps, each asking a few routes: they do not pay for all."""
    with _served(database_url, tmp_path, warm_routes=False) as client:
        assert "/api/session/start" not in resolved
        assert "/api/search" not in resolved
        assert list(_first_requests(client)) == [201, 201, 200, 200, 200, 200]
        assert "/api/session/start" in resolved
