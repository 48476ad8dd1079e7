"""The FastAPI application: routers, error handlers, middleware and the database lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import health
from app.api.errors import install_error_handlers
from app.api.middleware import BearerTokenMiddleware, BodySizeLimitMiddleware
from app.capture.routes import router as capture_router
from app.config import Settings, get_settings
from app.context.routes import router as context_router
from app.db.engine import make_async_engine, make_sessionmaker, resolve_database_url
from app.proxy import routes as proxy_routes
from app.search.routes import router as search_router
from app.state import AppState
from app.sync.routes import router as sync_router


def create_app(settings: Settings | None = None, *, database_url: str | None = None) -> FastAPI:
    """Build the app. The database URL is resolved at startup (embedded server if none is set)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = database_url or resolve_database_url(settings)
        engine = make_async_engine(url, pool_size=settings.db_pool_size)
        app.state.agmem = AppState(
            settings=settings,
            database_url=url,
            engine=engine,
            sessionmaker=make_sessionmaker(engine),
        )
        try:
            yield
        finally:
            await engine.dispose()

    app = FastAPI(
        title="antigravity-mem",
        summary="Memory for AI coding agents: capture, compress, search and inject context.",
        version="0.1.0",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    # Capture first: a request is matched against the routes in order, and observe/result are
    # most of the traffic (no other router has a path under /api/session*, /api/observ*).
    app.include_router(capture_router)
    app.include_router(health.router)
    app.include_router(sync_router)
    app.include_router(proxy_routes.router)
    app.include_router(search_router)
    app.include_router(context_router)
    # Outermost first: the size limit applies before authentication reads anything.
    app.add_middleware(BearerTokenMiddleware, token=settings.api_token)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    return app
