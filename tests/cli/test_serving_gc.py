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
    # The lifespan resolves routes, opens pools and starts the MCP server after the import-time
    # heap is frozen; what it built stayed in the collections, and each full collection under
    # load walked it while every request waited (docs/capture.md, "Garbage collection").
    kept: list[Any] = []

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        kept.extend({"built": n} for n in range(BUILT))
        yield

    app = FastAPI(lifespan=lifespan)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))

    async def start_and_stop() -> int:
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        config.load()
        server = StoppingServer(config, hurry=lambda: None)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[listener])
        frozen = gc.get_freeze_count()
        server.should_exit = True
        await server.shutdown(sockets=[listener])
        return frozen

    gc.collect()
    gc.unfreeze()
    try:
        frozen = asyncio.run(start_and_stop())
    finally:
        gc.unfreeze()
        listener.close()
    assert frozen >= BUILT, frozen
