"""tests/route_cache.py: the apps a test process builds share each included route's build."""

from __future__ import annotations

import dataclasses
import gc
import os
import weakref
from pathlib import Path
from typing import Any

import fastapi.routing
import pytest
from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from pydantic.fields import FieldInfo

from app.main import create_app
from tests import route_cache
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
    assert all(second[path].dependant is first[path].dependant for path in first)
    assert all(second[path] is not first[path] for path in first)


def test_each_app_reads_overrides_from_itself(tmp_path: Path) -> None:
    # The built route reads its provider's overrides per request: one bound to another app would
    # never see this app's.
    first_app, second_app = an_app(tmp_path), an_app(tmp_path)
    first, second = built(first_app), built(second_app)

    assert all(route.dependency_overrides_provider is first_app for route in first.values())
    assert all(route.dependency_overrides_provider is second_app for route in second.values())


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


def _marker() -> str:
    return "own"


def _router() -> APIRouter:
    router = APIRouter()

    @router.get("/marker")
    def marker(value: str = Depends(_marker)) -> dict[str, str]:
        return {"value": value}

    return router


def _answer(app: FastAPI) -> str:
    with TestClient(app) as client:
        value: str = client.get("/marker").json()["value"]
    return value


def _including(router: APIRouter) -> FastAPI:
    app = FastAPI()
    app.include_router(router)
    return app


def test_an_override_set_after_an_apps_first_request_is_used() -> None:
    router = _router()
    _answer(_including(router))
    app = _including(router)
    assert _answer(app) == "own"

    app.dependency_overrides[_marker] = lambda: "overridden"

    assert _answer(app) == "overridden"


def test_an_apps_override_never_reaches_another_app() -> None:
    router = _router()
    first = _including(router)
    _answer(first)
    first.dependency_overrides[_marker] = lambda: "first's"

    assert _answer(_including(router)) == "own"
    assert _answer(first) == "first's"


class _OwnResponse(JSONResponse):
    pass


def test_each_inclusion_keeps_its_own_options() -> None:
    router = _router()

    def own_id(route: APIRoute) -> str:
        return f"own-{route.name}"

    apps = [FastAPI() for _ in range(3)]
    apps[0].include_router(router, tags=["first"])
    apps[1].include_router(
        router,
        tags=["second"],
        responses={418: {"description": "teapot"}},
        generate_unique_id_function=own_id,
        default_response_class=_OwnResponse,
    )
    apps[2].include_router(router, tags=["first"], responses={418: {"description": "kettle"}})
    routes = [built(app)["/marker ['GET']"] for app in apps if _answer(app)]

    assert [route.tags for route in routes] == [["first"], ["second"], ["first"]]
    assert [route.responses for route in routes] == [
        {},
        {418: {"description": "teapot"}},
        {418: {"description": "kettle"}},
    ]
    assert [route.unique_id for route in routes] == [
        "marker_marker_get",
        "own-marker",
        "marker_marker_get",
    ]
    assert routes[1].response_class is _OwnResponse


@pytest.mark.skipif(bool(os.environ.get("AGMEM_TEST_FRESH_ROUTES")), reason="the cache is off")
def test_the_cache_keeps_no_app_nor_router_alive() -> None:
    router = _router()
    app = _including(router)
    _answer(app)
    _answer(_including(router))
    app_ref, router_ref = weakref.ref(app), weakref.ref(router)
    router_id = id(router)
    assert any(key[1] == router_id for key in route_cache._BUILT)

    del app, router
    gc.collect()

    assert app_ref() is None
    assert router_ref() is None
    assert not any(key[1] == router_id for key in route_cache._BUILT)


def _shape(value: Any) -> Any:
    """What a built route answers with: its parts by value, an app or a handler by type."""
    if isinstance(value, FastAPI) or callable(value) and not isinstance(value, type):
        return type(value).__qualname__, getattr(value, "__qualname__", None)
    if isinstance(value, TypeAdapter):
        return TypeAdapter, repr(value._type)
    if isinstance(value, FieldInfo):
        return repr(value), repr(value.annotation)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value), [
            (field.name, _shape(getattr(value, field.name, None)))
            for field in dataclasses.fields(value)
            if field.name not in ("app", "dependency_overrides_provider")
        ]
    if isinstance(value, dict):
        return [(_shape(key), _shape(item)) for key, item in value.items()]
    if isinstance(value, list | tuple | set):
        return type(value), [_shape(item) for item in value]
    return repr(value)


def test_a_route_from_the_cache_is_the_one_fastapi_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI runs with the cache on: this compares each of the app's routes, and its OpenAPI schema,
    # with those FastAPI builds itself (AGMEM_TEST_FRESH_ROUTES for a whole run).
    built(an_app(tmp_path))
    cached_app = an_app(tmp_path)
    cached = built(cached_app)
    with monkeypatch.context() as fresh_builds:
        fresh_builds.setattr(
            fastapi.routing._EffectiveRouteContext,
            "from_api_route",
            classmethod(route_cache._FROM_API_ROUTE),
        )
        fresh_app = an_app(tmp_path)
        fresh = built(fresh_app)

    assert cached.keys() == fresh.keys()
    for path, route in fresh.items():
        assert _shape(cached[path]) == _shape(route), path
        assert cached[path].dependency_overrides_provider is cached_app
    assert cached_app.openapi() == fresh_app.openapi()
