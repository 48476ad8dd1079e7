"""The capture hot routes called from the app's entry, past the framework's per-request layers.

Every request went through FastAPI's entry (its telemetry check), Starlette's entry, the
framework's exception, telemetry, body-limit and exit-stack middlewares, the router (which tries
the routes in order and builds a child scope) and the route's request/response wrapper before
reaching `observe` or `observe/result`: ~12% of the app's Python a capture request in process.
`App` answers an exact `POST` to one of those paths itself, through the same pieces that decide
what a client sees: our Host rule (on loopback) and origin rule, Starlette's
`ServerErrorMiddleware` (a 500 in the shared shape, the error re-raised for the server's log),
body limit and token rule, then the endpoint with the app's exception handlers looked up as
Starlette's `ExceptionMiddleware` looks them up. Anything else (another method, another path
spelling, a mounted root path) takes the full stack, where the same routes are registered (and
documented in the OpenAPI schema) as before. In both, the Host and origin rules are outside the
server-error layer, so that a 500 carries an allowed origin's CORS headers.

The fast path skips `Utf8UrlMiddleware` (a URL that percent-encodes bytes that are not UTF-8 is
a 400 elsewhere under /api/): the two paths are fixed strings matched exactly and their
endpoints read no query, so a query such as `?x=%FF` names nothing and the request is answered
as one without it. The check guards names a client finds its data by; these URLs hold none.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.middleware import (
    BearerTokenMiddleware,
    BodySizeLimitMiddleware,
    LoopbackHostMiddleware,
)
from app.api.origins import BrowserOriginMiddleware, OriginPolicy

Endpoint = Callable[[Request], Awaitable[Response]]
Handler = Callable[[Request, Exception], Any]


class _Endpoint:
    """Calls an endpoint that takes the `Request`, and renders what it raises with the app's
    handlers: by status for an HTTPException, else by the first class of the error's MRO that has
    one; an error without a handler goes up, to the body limit (its own signal) or to the
    server-error layer."""

    def __init__(
        self,
        endpoint: Endpoint,
        by_status: Mapping[int, Handler],
        by_class: Mapping[type[BaseException], Handler],
    ) -> None:
        self.endpoint = endpoint
        self.by_status = by_status
        self.by_class = by_class

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await self.endpoint(request)
        except Exception as error:
            handler = self._handler(error)
            if handler is None:
                raise
            response = await handler(request, error)
        await response(scope, receive, send)

    def _handler(self, error: Exception) -> Handler | None:
        if isinstance(error, HTTPException):
            handler = self.by_status.get(error.status_code)
            if handler is not None:
                return handler
        for cls in type(error).__mro__:
            handler = self.by_class.get(cls)
            if handler is not None:
                return handler
        return None


def _sync_handler(handler: Handler) -> Handler:
    """A handler the endpoint layer can await whatever it is: a plain function runs in a thread,
    as Starlette runs one."""

    async def run(request: Request, error: Exception) -> Any:
        return await run_in_threadpool(handler, request, error)

    return run


class App(FastAPI):
    """The FastAPI app, with `hot_routes` ({path: endpoint}, POST only) answered past the
    framework's layers (see the module's docstring). `token` and `max_body_bytes` are the rules
    the app's own middlewares apply; `origins` and `allowed_hosts` the rules applied outside the
    server-error layer, on every route (`app.main` sets them all)."""

    hot_routes: Mapping[str, Endpoint] = {}
    hot_token: str | None = None
    hot_max_body_bytes: int = 0
    origins: OriginPolicy = OriginPolicy()
    allowed_hosts: list[str] | None = None  # None: no Host rule (not bound to loopback)
    _hot_stacks: dict[str, ASGIApp] | None = None

    def build_middleware_stack(self) -> ASGIApp:
        return self._outside_server_errors(super().build_middleware_stack())

    def _outside_server_errors(self, app: ASGIApp) -> ASGIApp:
        """The Host and origin rules around Starlette's server-error layer: its 500 is sent on
        the send it was given, which, inside the origin rule, carried no CORS headers (an
        extension's fetch saw an opaque network failure, not the error's shape). Both rules
        only read headers; neither raises."""
        app = BrowserOriginMiddleware(app, policy=self.origins)
        if self.allowed_hosts is not None:
            app = LoopbackHostMiddleware(app, extra_hosts=self.allowed_hosts)
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not self.root_path:
            stacks = self._hot_stacks
            if stacks is None:
                stacks = self._hot_stacks = self._build_hot_stacks()
            stack = stacks.get(scope["path"])
            if stack is not None:
                scope["app"] = self
                await stack(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _build_hot_stacks(self) -> dict[str, ASGIApp]:
        # Built at the first request, as Starlette builds its middleware stack, so handlers added
        # after the app was created count too; split as Starlette splits them.
        server_error: Handler | None = None
        by_status: dict[int, Handler] = {}
        by_class: dict[type[BaseException], Handler] = {}
        for key, handler in self.exception_handlers.items():
            async_handler = handler if _is_coroutine_function(handler) else _sync_handler(handler)
            if key in (500, Exception):
                server_error = handler
            elif isinstance(key, int):
                by_status[key] = async_handler
            else:
                by_class[key] = async_handler
        stacks: dict[str, ASGIApp] = {}
        for path, endpoint in self.hot_routes.items():
            stack: ASGIApp = BodySizeLimitMiddleware(
                BearerTokenMiddleware(
                    _Endpoint(endpoint, by_status, by_class), token=self.hot_token
                ),
                max_bytes=self.hot_max_body_bytes,
            )
            stack = ServerErrorMiddleware(stack, handler=server_error, debug=self.debug)
            stacks[path] = self._outside_server_errors(stack)
        return stacks


def _is_coroutine_function(handler: Any) -> bool:
    while isinstance(handler, functools.partial):
        handler = handler.func
    # A callable object with an async __call__ counts, as Starlette counts it.
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        type(handler).__call__
    )
