"""Each test process builds an included route once, not once per app.

FastAPI 0.165 builds an included router's routes (each endpoint's signature read, a pydantic
adapter per parameter) on that router's first request in each app: ~30 ms of CPU in each test
that builds an app and asks it one route, the same work each time for the same module-level
route. The built route holds nothing of its app but the app as `dependency_overrides_provider`,
read per request for overrides no test sets: a route built once answers every app the same.
Off while something watches FastAPI build routes (tests/api/test_warm_routes.py replaces
`fastapi.routing.get_dependant` to see which it builds), so that a watch sees every build, for
an app given dependency overrides, and for the whole run with AGMEM_TEST_FRESH_ROUTES set.
"""

from __future__ import annotations

import os
from typing import Any

import fastapi.routing

_FROM_API_ROUTE = fastapi.routing._EffectiveRouteContext.from_api_route.__func__  # type: ignore[attr-defined]
_GET_DEPENDANT = fastapi.routing.get_dependant
_BUILT: dict[tuple[Any, ...], Any] = {}


def _key(original_route: Any, include_context: Any) -> tuple[Any, ...]:
    # By identity (routes do not hash); each cached route keeps the objects of its key alive, so
    # no id in a key can be reused by another object.
    return (
        id(original_route),
        id(include_context.included_router),
        include_context.prefix,
        tuple(map(id, include_context.dependencies)),
        include_context.max_body_size,
        include_context.include_in_schema,
        include_context.deprecated,
    )


def _from_api_route(cls: Any, *, original_route: Any, include_context: Any) -> Any:
    provider = include_context.dependency_overrides_provider
    if fastapi.routing.get_dependant is not _GET_DEPENDANT or getattr(
        provider, "dependency_overrides", None
    ):
        return _FROM_API_ROUTE(cls, original_route=original_route, include_context=include_context)
    key = _key(original_route, include_context)
    if key not in _BUILT:
        built = _FROM_API_ROUTE(cls, original_route=original_route, include_context=include_context)
        _BUILT[key] = (built, original_route, include_context.included_router)
    return _BUILT[key][0]


def install() -> None:
    if os.environ.get("AGMEM_TEST_FRESH_ROUTES"):
        return
    fastapi.routing._EffectiveRouteContext.from_api_route = classmethod(_from_api_route)  # type: ignore[method-assign,assignment]
