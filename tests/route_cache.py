"""Each test process builds an included route once, not once per app.

FastAPI 0.165 builds an included router's routes (each endpoint's signature read, a pydantic
adapter per parameter) on that router's first request in each app: ~30 ms of CPU in each test
that builds an app and asks it one route, the same work each time for the same module-level
route. What is built is shared; each app gets its own copy of the built route bound to its own
`dependency_overrides_provider` (FastAPI reads the app's overrides from it per request, so one
app's overrides never answer for another, and overrides set after a first request count), with
its own request handler (cheap: made from the built parts). Off while something watches FastAPI
build routes (tests/api/test_warm_routes.py replaces `fastapi.routing.get_dependant` to see which
it builds), so that a watch sees every build, and for the whole run with AGMEM_TEST_FRESH_ROUTES.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import weakref
from collections.abc import Hashable
from typing import Any

import fastapi.routing
from fastapi.datastructures import DefaultPlaceholder

_FROM_API_ROUTE = fastapi.routing._EffectiveRouteContext.from_api_route.__func__  # type: ignore[attr-defined]
_GET_DEPENDANT = fastapi.routing.get_dependant
# Each entry the built parts alone: no app (provider, handler) and no route or router.
_BUILT: dict[tuple[Hashable, ...], Any] = {}


class _Unkeyable(Exception):
    """An inclusion option with no value to compare: such an inclusion is built afresh."""


def _frozen(value: Any) -> Hashable:
    if isinstance(value, DefaultPlaceholder):
        return (DefaultPlaceholder, _frozen(value.value))
    if isinstance(value, dict):
        return (dict, tuple((_frozen(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value), tuple(map(_frozen, value)))
    if isinstance(value, set | frozenset):
        return (frozenset, frozenset(map(_frozen, value)))
    try:
        hash(value)
    except TypeError as error:  # a route among the callbacks, an unhashable object
        raise _Unkeyable from error
    return value


def _key(original_route: Any, include_context: Any) -> tuple[Hashable, ...] | None:
    """Every option of the inclusion but its provider (bound per app), or None: build afresh.

    The route and the router by identity (routes do not hash): an entry goes when either does
    (`_remember`), before its id can be another object's.
    """
    try:
        return (
            id(original_route),
            id(include_context.included_router),
            *(
                (field.name, _frozen(getattr(include_context, field.name)))
                for field in dataclasses.fields(include_context)
                if field.name not in ("included_router", "dependency_overrides_provider")
            ),
        )
    except _Unkeyable:
        return None


def _bound(template: Any, original_route: Any, include_context: Any) -> Any:
    """The built route for this inclusion: its provider and request handler this app's own."""
    context = copy.copy(template)
    context.original_route = original_route
    context.dependency_overrides_provider = include_context.dependency_overrides_provider
    # As FastAPI's from_api_route makes it: the handler reads the route's parts from the context.
    token = fastapi.routing._effective_route_context_var.set(context)
    try:
        context.app = fastapi.routing.wrap_app_with_body_limit(
            fastapi.routing.request_response(original_route.get_route_handler()),
            context.max_body_size,
        )
    finally:
        fastapi.routing._effective_route_context_var.reset(token)
    return context


def _from_api_route(cls: Any, *, original_route: Any, include_context: Any) -> Any:
    if fastapi.routing.get_dependant is not _GET_DEPENDANT:
        return _FROM_API_ROUTE(cls, original_route=original_route, include_context=include_context)
    key = _key(original_route, include_context)
    if key is None:
        return _FROM_API_ROUTE(cls, original_route=original_route, include_context=include_context)
    if key not in _BUILT:
        built = _FROM_API_ROUTE(cls, original_route=original_route, include_context=include_context)
        _remember(key, built, original_route, include_context.included_router)
        return built
    return _bound(_BUILT[key], original_route, include_context)


def _remember(key: tuple[Hashable, ...], built: Any, route: Any, router: Any) -> None:
    template = copy.copy(built)
    template.original_route = template.app = template.dependency_overrides_provider = None
    _BUILT[key] = template
    for owner in (route, router):
        weakref.finalize(owner, _BUILT.pop, key, None)


def install() -> None:
    if os.environ.get("AGMEM_TEST_FRESH_ROUTES"):
        return
    fastapi.routing._EffectiveRouteContext.from_api_route = classmethod(_from_api_route)  # type: ignore[method-assign,assignment]
