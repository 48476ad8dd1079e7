"""The FastAPI application: routers, error handlers, middleware and the database lifespan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig

from app import health
from app.api.errors import install_error_handlers
from app.api.hot import App
from app.api.middleware import (
    BearerTokenMiddleware,
    BodySizeLimitMiddleware,
    HeadAsGetMiddleware,
    Utf8UrlMiddleware,
)
from app.api.one_value_query import OneValuePerQueryNameMiddleware
from app.api.origins import OriginPolicy
from app.api.outage_log import OUTAGE_LOG
from app.capture.routes import HOT_ENDPOINTS, add_hot_routes
from app.capture.routes import router as capture_router
from app.config import Settings, get_settings
from app.context.routes import router as context_router
from app.db.engine import make_async_engine, make_sessionmaker, resolve_database_url
from app.db.supervisor import supervised
from app.errors import first_line
from app.llm.embeddings import hold_embedder, release_embedder
from app.llm.ratelimit import gemini_gate
from app.mcp.http import mount_mcp
from app.memories import routes as memories
from app.memories.resume import briefing_client
from app.proxy import routes as proxy_routes
from app.search.routes import router as search_router
from app.state import AppState
from app.sync.routes import router as sync_router
from app.warmup import import_request_modules, resolve_routes, warm_up
from app.worker.loop import Worker

log = structlog.get_logger(__name__)

NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


async def import_beside() -> None:
    """`import_request_modules` in a thread; its failure logged when it happens: the server
    runs on without it (the first requests import what it would have), and an error kept for
    the lifespan's end surfaced only as the shutdown's failure."""
    try:
        await asyncio.to_thread(import_request_modules)
    except Exception as error:
        log.error("warmup.import_failed", error=first_line(error), exc_info=error)


def create_app(
    settings: Settings | None = None,
    *,
    database_url: str | None = None,
    run_worker: bool = False,
    embedded: bool = False,
    hurry: asyncio.Event | None = None,
    warm_routes: bool = False,
) -> FastAPI:
    """Build the app. The database URL is resolved at startup (embedded server if none is set);
    with `run_worker`, a worker runs in the same process (`agmem serve` without --no-worker).
    `embedded` says `database_url` is the embedded server of `settings.pgdata` (`agmem serve`
    resolved it first); the app then restarts that server if it dies, as it does when it
    started the server itself. `hurry`, once set, cuts the worker's grace short at shutdown
    (a second Ctrl-C to `agmem serve`). With `warm_routes` (`agmem serve`), the routes are
    resolved before the first request rather than by it (`resolve_routes`), and what the first
    requests import is imported beside the start (`import_request_modules`)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        OUTAGE_LOG.window = settings.refusal_log_seconds
        warm_up(settings)  # before the first request, which would otherwise pay for it
        if warm_routes:
            resolve_routes(app)
        url = database_url or resolve_database_url(settings)
        engine = make_async_engine(url, pool_size=settings.db_pool_size)
        briefings = briefing_client(settings)
        state = app.state.agmem = AppState(
            settings=settings,
            database_url=url,
            engine=engine,
            sessionmaker=make_sessionmaker(engine),
            gemini_gate=gemini_gate(settings),
            briefing_client=briefings,
        )
        stop = asyncio.Event()
        # A URL given without `embedded` (the tests' server) is not ours to restart.
        pgdata = settings.embedded_pgdata if embedded or database_url is None else None
        hold_embedder(settings)
        try:
            async with supervised(pgdata, url, state.drop_dead_connections) as state.supervisor:
                worker = (
                    asyncio.create_task(
                        Worker(
                            settings=settings, sessionmaker=state.sessionmaker, database_url=url
                        ).run(stop, hurry=hurry)
                    )
                    if run_worker
                    else None
                )
                importing = asyncio.create_task(import_beside()) if warm_routes else None
                try:
                    async with mcp.running():
                        yield
                finally:
                    stop.set()
                    try:
                        if worker is not None:
                            await worker
                    finally:
                        if importing is not None:
                            await importing
        finally:
            OUTAGE_LOG.flush()
            try:
                await briefings.close()
                await engine.dispose()
            finally:  # a dispose that fails or is cancelled must not leave the embedder held
                await asyncio.to_thread(release_embedder, settings)

    app = App(
        title="antigravity-mem",
        summary="Memory for AI coding agents: capture, compress, search and inject context.",
        version="0.1.0",
        lifespan=lifespan,
        # FastAPI's native OpenTelemetry looked for configured providers on every request (~8 µs
        # of the capture hot path's ~145 µs in process); agmem ships no OpenTelemetry SDK, so
        # none can be configured and the lookups only cost.
        telemetry=NO_TELEMETRY,
    )
    install_error_handlers(app)
    # Capture first: a request is matched against the routes in order, and observe/result are
    # most of the traffic (no other router has a path under /api/session*, /api/observ*).
    add_hot_routes(app)
    app.include_router(capture_router)
    app.include_router(health.router)
    app.include_router(sync_router)
    app.include_router(proxy_routes.router)
    app.include_router(search_router)
    app.include_router(context_router)
    app.include_router(memories.router)
    mcp = mount_mcp(app, settings)
    # Outermost first: the size limit applies before authentication reads anything.
    # A URL's encoding is judged only for a request that passed them, and a query's repeated
    # values once they are known to be UTF-8. Innermost, a HEAD is made the GET routes take.
    app.add_middleware(HeadAsGetMiddleware)
    app.add_middleware(OneValuePerQueryNameMiddleware)
    app.add_middleware(Utf8UrlMiddleware)
    app.add_middleware(BearerTokenMiddleware, token=settings.api_token)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    # Outside all of these and of the server-error layer (`App.build_middleware_stack`): on
    # loopback, a request for another host name is refused before anything runs; then the origin
    # rule, before the token rule (a browser sends no credentials with a preflight).
    app.origins = OriginPolicy(settings.allowed_origins)
    app.allowed_hosts = settings.allowed_hosts if settings.binds_loopback_only else None
    # observe and observe/result again, answered by the app past the framework's layers through
    # the same two rules (app/api/hot.py).
    app.hot_routes = HOT_ENDPOINTS
    app.hot_token = settings.api_token
    app.hot_max_body_bytes = settings.max_body_bytes
    return app
