"""The streamable HTTP endpoint at `/mcp`, which loads the MCP server on its first request.

The MCP SDK and the tools' server (app/mcp/server.py) cost ~0.7-0.9 s of CPU to import, about a
third of what `agmem serve` imported before answering `/health`, and most servers (every test's)
never serve an MCP call. They are imported on the first request to `/mcp`, in a thread so that
the requests under way go on meanwhile; that request waits for them once (see docs/mcp.md).
A start that fails is tried again after a delay that doubles with each failure in a row.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from app.api.errors import client_gone
from app.api.middleware import send_error
from app.config import Settings
from app.errors import ServiceUnavailable, first_line
from app.heap import freeze_late_load
from app.mcp.wire import MESSAGE_TEXT, surrogates_cleaned
from app.state import AppState

if TYPE_CHECKING:
    from fastapi import FastAPI
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from app.mcp.server import StateProvider

log = structlog.get_logger(__name__)

# The delay before a start is tried again after a failure, doubled at each failure in a row up
# to the cap (docs/mcp.md, "When the start fails"): 1, 2, 4, 8, 16, 30, 30 ... s.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0


@dataclass(frozen=True)
class Unavailable:
    """Why `/mcp` answers 503, and in how many seconds to come back (None: not at all)."""

    detail: str
    retry_after: int | None = None


def _import_server() -> None:
    import app.mcp.server  # noqa: F401


NOT_RUNNING = Unavailable("the MCP server is not running")


class McpEndpoint:
    """The endpoint; its session manager is started by its first request and runs until the app
    lifespan (`running`) ends."""

    def __init__(
        self,
        state: StateProvider,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.settings = settings
        self.clock = clock
        self.manager: StreamableHTTPSessionManager | None = None
        self._stop: asyncio.Event | None = None  # set while the lifespan runs
        self._context: contextvars.Context | None = None
        self._starting: asyncio.Task[bool] | None = None
        self._serving: asyncio.Task[None] | None = None
        # The failures in a row (start or running manager), the last one's cause, and when the
        # next start may be tried.
        self._failures = 0
        self._failure = ("", "", "")  # what failed, what comes next, the cause
        self._retry_at = 0.0
        self._running_since = 0.0

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Let requests start a session manager (a new one in each lifespan, and after one
        failed: the SDK's can run only once) and stop it at the lifespan's end."""
        stop = self._stop = asyncio.Event()
        self._failures, self._retry_at = 0, 0.0
        # The manager's tasks run in the lifespan's context, as when the lifespan entered it,
        # not in that of the request which happened to start it.
        self._context = contextvars.copy_context()
        try:
            yield
        finally:
            stop.set()
            try:
                starting, self._starting = self._starting, None
                if starting is not None:
                    await asyncio.wait([starting])
                serving, self._serving = self._serving, None
                if serving is not None:
                    await serving
            finally:
                self._stop = self._context = None

    async def _manager(self) -> StreamableHTTPSessionManager | Unavailable:
        """The running session manager, started by the first request, or why there is none:
        outside the lifespan, or a failure whose delay has not run out."""
        # The lifespan's end first: it stops the manager, which stays set until the manager's
        # task runs again, and would be handed a request it is stopping under.
        stop = self._stop
        if stop is None or stop.is_set():
            return NOT_RUNNING
        if self.manager is not None:
            return self.manager
        if self._starting is None:
            if self._failures and self.clock() < self._retry_at:
                return self._backing_off()
            self._starting = asyncio.create_task(self._start(stop), context=self._context)
        # Shielded: a request cancelled meanwhile (its client gone) leaves the start to finish
        # for the next one.
        started = await asyncio.shield(self._starting)
        # A start failing as the lifespan ends is not retried: no Retry-After to come back for.
        if stop.is_set():
            return NOT_RUNNING
        if not started:
            return self._backing_off()
        return NOT_RUNNING if self.manager is None else self.manager

    def _backing_off(self) -> Unavailable:
        wait = max(1, math.ceil(self._retry_at - self.clock()))
        failed, next_step, cause = self._failure
        detail = f"the MCP server {failed} ({next_step} in {wait} s): {cause}"
        return Unavailable(detail, retry_after=wait)

    def _failed(self, event: str, error: Exception, failed: str, next_step: str) -> None:
        """Count a failure in the streak, delay the next start, and log it: the traceback for
        the streak's first failure (or a new cause), one line for the next ones, which a
        persistent cause (a broken SDK) would otherwise repeat at every retry."""
        cause = first_line(_innermost(error))
        self._failures += 1
        delay = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** min(self._failures - 1, 16))
        self._retry_at = self.clock() + delay
        repeated = self._failures > 1 and self._failure[2] == cause
        self._failure = (failed, next_step, cause)
        extra = {"retry_in": delay, "failures": self._failures}
        if repeated:
            log.error(event, error=cause, **extra)
        else:
            log.error(event, error=cause, exc_info=error, **extra)

    async def _start(self, stop: asyncio.Event) -> bool:
        """Start the session manager; whether it started. A failure is logged here, once for
        all the requests that waited for this start, and the start is tried again after the
        delay: a start that failed once (an import under way while the SDK was being upgraded)
        may not fail twice, but one that keeps failing must not cost an import per request."""
        try:
            await self._start_serving(stop)
        except Exception as error:
            if self._starting is asyncio.current_task():
                self._starting = None
            self._failed("mcp.start_failed", error, "could not start", "retried")
            return False
        # The streak goes on: a manager that fails at once after this start is delayed as the
        # failures before it were. It ends with a manager that ran for a while (`_serve`).
        self._running_since = self.clock()
        if self._failures:
            log.info("mcp.recovered", failures=self._failures)
        return True

    async def _start_serving(self, stop: asyncio.Event) -> None:
        await asyncio.to_thread(_import_server)
        if stop.is_set():  # the lifespan ended during the import
            return
        from mcp.server.transport_security import TransportSecuritySettings

        from app.mcp.server import build_server

        server = build_server(self.state)
        server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            max_request_body_size=self.settings.max_body_bytes,
            # The SDK's own Host/Origin check is off: the app's Host rule (on loopback) and
            # origin rule run before `/mcp` (app/api/middleware.py, app/api/origins.py), answer
            # in the error shape and allow what the rest of the service allows. The SDK's
            # allowed only http://<loopback>[:port] origins and refused the rest in plain text.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = server.session_manager
        started = asyncio.get_running_loop().create_future()
        self._serving = asyncio.create_task(self._serve(manager, stop, started))
        await started
        # `agmem serve` froze its heap after startup (app/cli/serving.py); the SDK, imported by
        # this first start, adds ~46,700 objects which a full collection (~27 ms) would
        # otherwise walk under load.
        freeze_late_load("mcp")

    async def _serve(
        self,
        manager: StreamableHTTPSessionManager,
        stop: asyncio.Event,
        started: asyncio.Future[None],
    ) -> None:
        """Run `manager` until `stop`. Its failure is logged, not raised: the lifespan's end
        awaits this task, and the server's shutdown would fail with it."""
        try:
            async with manager.run():
                self.manager = manager
                started.set_result(None)
                try:
                    await stop.wait()
                finally:
                    self.manager = None
        except BaseException as error:
            if not started.done():
                started.set_exception(error)  # the start's failure, which `_start` logs
            elif isinstance(error, Exception):
                if self.clock() - self._running_since >= RETRY_MAX_SECONDS:
                    self._failures = 0  # it ran well: a new streak
                self._failed("mcp.server_failed", error, "failed", "restarted")
                if not stop.is_set():  # a request after the delay starts a new one
                    self._starting = None
            if not isinstance(error, Exception):
                raise  # a cancellation goes on

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = await self._manager()
        if isinstance(manager, Unavailable):
            retry = {} if manager.retry_after is None else {"Retry-After": str(manager.retry_after)}
            unavailable = ServiceUnavailable(manager.detail)
            await send_error(
                send, unavailable.status_code, unavailable.error, unavailable.detail, retry
            )
            return
        cleaned = await _surrogates_cleaned(receive)
        if cleaned is None:
            # The SDK read the close as ClientDisconnect and logged it with a traceback.
            client_gone(scope)
            return
        # Imported here, not at the module's top: it imports the SDK's types, which `agmem
        # serve` loads with the first /mcp request (`_manager`, above), not at its start.
        from app.mcp.refusals import json_rpc_errors

        await manager.handle_request(
            _media_type_lowered(scope), cleaned, json_rpc_errors(send, MESSAGE_TEXT.get())
        )


def _media_type_lowered(scope: Scope) -> Scope:
    """`scope` with its Content-Type's media type in lower case, its parameters as sent. Media
    types are case-insensitive (RFC 9110, 8.3.1), but the SDK compares the header's text with
    "application/json": `Content-Type: Application/JSON` was its 415."""
    headers = scope.get("headers", [])
    for index, (name, value) in enumerate(headers):
        if name == b"content-type":
            media_type, separator, parameters = bytes(value).partition(b";")
            lowered = media_type.strip().lower()
            if lowered != media_type:
                headers = list(headers)
                headers[index] = (name, lowered + separator + parameters)
                return {**scope, "headers": headers}
    return scope


def _innermost(error: BaseException) -> BaseException:
    """The error a group of one wraps: the manager's task group fails with "unhandled errors in
    a TaskGroup (1 sub-exception)", which names nothing."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


async def _surrogates_cleaned(receive: Receive) -> Receive | None:
    """`receive` with the request's body read whole (as the SDK reads it) and its lone surrogate
    escapes cleaned (`surrogates_cleaned`): the SDK answered a JSON-RPC parse error. None when
    the client closed the connection before its body was sent."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        if message["type"] != "http.request":
            return _replaying(message, receive)
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = surrogates_cleaned(b"".join(chunks))
    # Read by the SDK in this context, which its dispatcher runs the call in.
    MESSAGE_TEXT.set(body)
    return _replaying({"type": "http.request", "body": body, "more_body": False}, receive)


def _replaying(first: Message, receive: Receive) -> Receive:
    """A `receive` that gives `first`, then whatever `receive` gives."""
    pending = [first]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def mount_mcp(
    app: FastAPI, settings: Settings, *, clock: Callable[[], float] = time.monotonic
) -> McpEndpoint:
    """Serve the MCP tools at `/mcp` on `app`; enter `endpoint.running()` in the lifespan.
    `clock` times the delays after a failed start (the tests move it)."""

    def state() -> AppState:
        current: AppState = app.state.agmem
        return current

    endpoint = McpEndpoint(state, settings, clock=clock)
    # POST only. The endpoint is stateless: it offers no server-initiated SSE stream and has no
    # session to end, and the spec's answer to a GET or DELETE then is 405. Handed to the SDK, a
    # GET opened an SSE stream that never sent anything (`curl` waited forever) and a DELETE got
    # a 405 without the `Allow` header. The router's 405 names `Allow: POST`, in our error shape;
    # the SDK's client opens neither without a session id, which a stateless server never gives.
    app.router.routes.append(Route("/mcp", endpoint=endpoint, methods=["POST"]))
    return endpoint
