"""tests/route_cache.py: the apps a test process builds share each included route's build."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import fastapi.routing
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from app.main import create_app
from tests.conftest import make_settings


def built(app: FastAPI) -> dict[str, Any]:
    """The app's included API routes as FastAPI built them, by path and methods."""
    return {
        f"{context.path} {sorted(context.methods or ())}": context._route_context
        for context in iter_route_contexts(app.router.routes)
        if context._route_context is not None
    }


def an_app(tmp_path: Path) -> FastAPI:
    return create_app(make_settings(home=tmp_path / "home"), database_url="postgresql://x@h/x")


@pytest.mark.skipif(bool(os.environ.get("AGMEM_TEST_FRESH_ROUTES")), reason="the cache is off")
def test_a_second_app_answers_with_the_routes_built_for_the_first(tmp_path: Path) -> None:
    first, second = built(an_app(tmp_path)), built(an_app(tmp_path))

    assert "/api/session/start ['POST']" in first
    assert first.keys() == second.keys()
    assert all(second[path] is first[path] for path in first)


def test_an_app_given_dependency_overrides_builds_its_own(tmp_path: Path) -> None:
    # The built route reads its app's overrides per request: one built for another app would
    # never see this app's.
    first = built(an_app(tmp_path))
    overridden = an_app(tmp_path)
    overridden.dependency_overrides[create_app] = lambda: None

    assert all(own is not first[path] for path, own in built(overridden).items())


def test_a_watch_of_fastapis_builds_sees_every_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built(an_app(tmp_path))
    paths: list[str] = []
    build = fastapi.routing.get_dependant

    def watched(*, path: str, **rest: Any) -> Any:
        paths.append(path)
        return build(path=path, **rest)

    monkeypatch.setattr(fastapi.routing, "get_dependant", watched)
    built(an_app(tmp_path))

    assert "/api/session/start" in paths
