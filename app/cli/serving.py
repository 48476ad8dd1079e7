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
"""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn
from uvicorn.lifespan.on import LifespanOn

from app.entry import Terminated, end_at_once, signalled


class StoppingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, hurry: Callable[[], None]) -> None:
        super().__init__(config)
        self.hurry = hurry  # called in the event loop once a second signal has come
        self.forced_by: int | None = None  # the second signal
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

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
        lifespan = self.lifespan
        # uvicorn skips the app's shutdown once forced; the app's tasks were then cancelled
        # under it by asyncio's exit.
        if isinstance(lifespan, LifespanOn) and not lifespan.shutdown_event.is_set():
            await lifespan.shutdown()

    def raise_if_forced(self) -> None:
        """End the command as interrupted by the second signal, if one came."""
        if self.forced_by is not None:
            raise Terminated if self.forced_by == signal.SIGTERM else KeyboardInterrupt
