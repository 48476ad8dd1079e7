"""What the proxy holds per app: the upstream HTTP client, the capture jobs, the memory blocks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import structlog
from fastapi import FastAPI, Request

from app.proxy.capture import Capturer
from app.proxy.context import MemoryBlocks, load_embedder
from app.proxy.forward import make_http_client
from app.proxy.record import end_idle_sessions
from app.state import AppState

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class ProxyState:
    http: httpx.AsyncClient
    capture: Capturer
    memory: MemoryBlocks


def get_app_state(request: Request) -> AppState:
    agmem: AppState = request.app.state.agmem
    return agmem


def get_proxy_state(request: Request) -> ProxyState:
    proxy: ProxyState = request.app.state.proxy
    return proxy


async def sweep_idle_sessions(agmem: AppState) -> None:
    """End idle proxy sessions every so often, so a project gone quiet gets its summary."""
    interval_s = min(60.0, max(0.5, agmem.settings.proxy_session_idle_seconds / 2))
    while True:
        await asyncio.sleep(interval_s)
        try:
            ended = await end_idle_sessions(agmem)
        except Exception as error:
            # The database may be briefly away; the next sweep tries again.
            log.warning("proxy.sweep_failed", error_type=type(error).__name__)
            continue
        if ended:
            log.info("proxy.sessions_ended_idle", sessions=ended)


@asynccontextmanager
async def proxy_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """One upstream client per app and the idle-session sweep; capture jobs finish at shutdown."""
    agmem: AppState = app.state.agmem
    embedder = await load_embedder(agmem)
    http = make_http_client(agmem.settings.proxy_upstream_timeout_seconds)
    capture = Capturer(agmem)
    memory = MemoryBlocks(agmem, embedder)
    app.state.proxy = ProxyState(http=http, capture=capture, memory=memory)
    sweeper = asyncio.create_task(sweep_idle_sessions(agmem))
    try:
        yield
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        await memory.close()
        await capture.jobs.drain(timeout_s=5.0)
        await http.aclose()
