"""uvicorn's server as `agmem serve` stops it: the first Ctrl-C or SIGTERM stops it normally, a
second hurries the app's shutdown and ends it as an interrupted command.

uvicorn's own second Ctrl-C (`force_exit`) stopped waiting for open connections and then
skipped the app's shutdown: asyncio's exit cancelled the app's tasks (the worker, the embedded
server's supervisor) under it, a lifespan traceback on stderr and exit 0 (5 of 6 times with the
two ~150 ms apart). Its second SIGTERM was taken for the first. Here a second of either still
stops waiting for connections, and the app's shutdown runs, told to hurry: the worker cancels
the jobs in hand at once (their claims given back) instead of giving them its grace. Then the
command ends as an interrupted one (130 / 143). A third ends the process at once, as a second
does while the embedded server stops at exit (app/entry.py).

The requests still open when a second signal comes are answered 503 in the error shape, with
`Retry-After` (or, once their answer has begun, their connections closed), and their tasks
cancelled and let end before the app's shutdown closes the pools under them: asyncio's exit
cancelled them after it, "Exception in ASGI application" with psycopg's CancelledError traceback
and uvicorn's plain-text 500.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn
from uvicorn._types import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.lifespan.on import LifespanOn

from app.cli.wire import JsonErrorsProtocol
from app.entry import Terminated, end_at_once, signalled
from app.heap import freeze_heap

# How long the requests cut short are let end (psycopg waits up to 5 s to cancel a query).
CUT_WAIT_SECONDS = 5.0


class Cuttable:
    """The app, with a request whose task the hurried stop cancelled ending quietly: it was
    answered (`JsonErrorsProtocol.cut_short`) before the cancellation."""

    def __init__(self, app: ASGI3Application) -> None:
        self.app = app
        self.cut: set[asyncio.Task[object]] = set()

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if asyncio.current_task() not in self.cut:
                raise


class StoppingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, hurry: Callable[[], None]) -> None:
        super().__init__(config)
        self.hurry = hurry  # called in the event loop once a second signal has come
        self.forced_by: int | None = None  # the second signal
        self._loop: asyncio.AbstractEventLoop | None = None
        self.requests: Cuttable | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        if not self.config.loaded:
            self.config.load()
        self.requests = Cuttable(self.config.loaded_app)
        self.config.loaded_app = self.requests
        await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # The app's startup (its lifespan: routes resolved, pools) ran after `agmem serve` froze
        # the import-time heap, and built ~15,000 objects that live as long as the process.
        # Left in the collections, every full collection under load walks them while each
        # request waits (docs/benchmarks.md, tail24). The MCP SDK is not loaded yet: the first
        # request to /mcp imports it, and freezes again then (app/mcp/http.py).
        freeze_heap()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not noted as uvicorn notes it (`_captured_signals`): it raised the signals again once
        # stopped, KeyboardInterrupt or SIGTERM's action after a normal stop.
        signalled()
        if not self.should_exit:
            self.should_exit = True
            return
        if self.forced_by is not None:
            end_at_once(sig)
        self.forced_by = sig
        self.force_exit = True  # uvicorn stops waiting for open connections
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.hurry)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if self.forced_by is not None:
            await self.cut_requests()
        protocol = self.config.http_protocol_class
        if isinstance(protocol, type) and issubclass(protocol, JsonErrorsProtocol):
            protocol.refusals.flush()  # a burst's count its window's end has not logged yet
        lifespan = self.lifespan
        # uvicorn skips the app's shutdown once forced; the app's tasks were then cancelled
        # under it by asyncio's exit.
        if isinstance(lifespan, LifespanOn) and not lifespan.shutdown_event.is_set():
            await lifespan.shutdown()

    async def cut_requests(self) -> None:
        """Answer the requests still open 503 and cancel them, each once, and let them end."""
        for connection in list(self.server_state.connections):
            if isinstance(connection, JsonErrorsProtocol):
                connection.cut_short()
        tasks = set(self.server_state.tasks)
        if not tasks or self.requests is None:
            return
        self.requests.cut.update(tasks)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=CUT_WAIT_SECONDS)

    def raise_if_forced(self) -> None:
        """End the command as interrupted by the second signal, if one came."""
        if self.forced_by is not None:
            raise Terminated if self.forced_by == signal.SIGTERM else KeyboardInterrupt
