"""What a serving process pays at its start, so that its first request does not.

The command line defers both (most commands need neither); `agmem serve` pays them in its
lifespan, before it answers, and `agmem mcp` beside its client's first messages. `agmem serve`
also imports, beside its first requests, what they would import (`import_request_modules`).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from app.config import Settings
from app.llm.gemini import load_client_library
from app.textscan import compile_all


def warm_up(settings: Settings) -> None:
    """Compile the scanners (~130 ms of CPU, else paid by the first long text scanned) and, with
    a Gemini key, import google-genai (~0.3-0.4 s, else paid by the first client built)."""
    compile_all()
    load_client_library(settings)


def resolve_routes(app: FastAPI) -> None:
    """Have FastAPI build every route of the app's included routers now (their dependants,
    request and response models), as it otherwise does on a router's first request (~40 ms for
    the app's 32 routes, loaded machine; docs/benchmarks.md, "Startup").
    Not for every app: the tests' apps, thousands, each ask a few routes."""
    for _ in iter_route_contexts(app.router.routes):
        pass


def import_request_modules() -> None:
    """Import anyio's asyncio backend (13 modules, 11-20 ms of CPU), which FastAPI imports on
    the first request with a `yield` dependency (the database session, every route but
    /health's and capture's): it was most of what a new server's first session start cost over
    its second (docs/benchmarks.md, "A new server's first request per hot route"). Run in a
    thread beside the start, so /health is not kept waiting for it."""
    import anyio._backends._asyncio  # noqa: F401
