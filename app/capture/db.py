"""The capture hot path's own engine: autocommit connections, no reset on return.

`observe` and `observe/result` each write with one self-contained statement (a CTE that checks
the session, touches it and inserts or updates), atomic by itself. On an autocommit connection
that is one round trip, where a transaction costs BEGIN, the statement and COMMIT; the answer is
still sent only after the statement, and so its commit, has returned. A dedicated engine (rather
than `execution_options(isolation_level=...)` on the shared one) avoids switching the isolation
level on every checkout and return, and with nothing to roll back the pool skips its reset; in
the profile that halved the database layer's CPU per request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.engine import sqlalchemy_url
from app.state import AppState


def make_autocommit_engine(url: str, *, pool_size: int) -> AsyncEngine:
    return create_async_engine(
        sqlalchemy_url(url),
        isolation_level="AUTOCOMMIT",
        pool_reset_on_return=None,
        # No overflow: SQLAlchemy closes overflow connections on return, so under a burst above
        # the pool size every request paid a new Postgres backend (fork, auth, connect). A
        # request now waits for a pooled connection instead.
        pool_size=pool_size,
        max_overflow=0,
        pool_pre_ping=False,
        pool_recycle=1800,
        connect_args={"connect_timeout": 5, "application_name": "agmem-capture"},
    )


@asynccontextmanager
async def capture_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's lifespan (the router's lifespan nests in it)."""
    state: AppState = app.state.agmem
    # Twice the shared pool: the hot routes are most of the traffic and hold a connection briefly.
    pool_size = 2 * state.settings.db_pool_size
    engine = make_autocommit_engine(state.database_url, pool_size=pool_size)
    app.state.capture_engine = engine
    try:
        yield
    finally:
        await engine.dispose()


def capture_engine(request: Request) -> AsyncEngine:
    """The autocommit engine of the running app (set up by `capture_lifespan`)."""
    engine: AsyncEngine = request.app.state.capture_engine
    return engine
