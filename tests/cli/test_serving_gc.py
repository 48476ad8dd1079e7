"""`agmem serve`'s server freezes what the app's startup built out of the garbage collector."""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI

from app.cli.serving import StoppingServer

BUILT = 20_000


def test_startup_freezes_what_the_lifespan_built() -> None:
    # The lifespan resolves routes and opens pools after the import-time heap is frozen; what it
    # built stayed in the collections, and each full collection under load walked it while every
    # request waited (docs/capture.md, "Garbage collection").
    kept: list[Any] = []

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Lists: the collector tracks them (not a dict of atoms, which it leaves untracked).
        kept.extend(["built", n] for n in range(BUILT))
        yield

    app = FastAPI(lifespan=lifespan)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))

    async def start_and_stop() -> int:
        # gc.get_freeze_count() also counts the test process's own heap, frozen at any time:
        # what tells a freeze after the lifespan is that the lifespan's objects are out of
        # the collections.
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        config.load()
        server = StoppingServer(config, hurry=lambda: None)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[listener])
        collected = {id(item) for item in gc.get_objects()}
        still_collected = sum(id(item) in collected for item in kept)
        server.should_exit = True
        await server.shutdown(sockets=[listener])
        return still_collected

    gc.collect()
    gc.unfreeze()
    try:
        still_collected = asyncio.run(start_and_stop())
    finally:
        gc.unfreeze()
        listener.close()
    assert still_collected == 0, f"{still_collected} of {BUILT} still in the collections"
