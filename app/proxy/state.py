"""What the proxy holds per app: the upstream HTTP client, the capture jobs, the memory source."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from fastapi import FastAPI, Request

from app.proxy.context import ContextSource, load_embedder, make_context_source
from app.proxy.forward import make_http_client
from app.proxy.queue import OrderedJobs
from app.state import AppState


@dataclass(slots=True)
class ProxyState:
    http: httpx.AsyncClient
    jobs: OrderedJobs
    context: ContextSource


def get_proxy_state(request: Request) -> ProxyState:
    proxy: ProxyState = request.app.state.proxy
    return proxy


@asynccontextmanager
async def proxy_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """One upstream client per app; capture jobs get a moment to finish at shutdown."""
    agmem: AppState = app.state.agmem
    embedder = await load_embedder(agmem)
    http = make_http_client(agmem.settings.proxy_upstream_timeout_seconds)
    jobs = OrderedJobs()
    app.state.proxy = ProxyState(http=http, jobs=jobs, context=make_context_source(agmem, embedder))
    try:
        yield
    finally:
        await jobs.drain(timeout_s=5.0)
        await http.aclose()
