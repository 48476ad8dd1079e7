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
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.db.engine import sqlalchemy_url
from app.state import AppState


def make_autocommit_engine(url: str, *, pool_size: int) -> AsyncEngine:
    return create_async_engine(
        sqlalchemy_url(url),
        isolation_level="AUTOCOMMIT",
        pool_reset_on_return=None,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        pool_recycle=1800,
        connect_args={"connect_timeout": 5, "application_name": "agmem-capture"},
    )


@asynccontextmanager
async def capture_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's lifespan (the router's lifespan nests in it)."""
    state: AppState = app.state.agmem
    engine = make_autocommit_engine(state.database_url, pool_size=state.settings.db_pool_size)
    app.state.capture_engine = engine
    try:
        yield
    finally:
        await engine.dispose()


async def get_autocommit_connection(request: Request) -> AsyncIterator[AsyncConnection]:
    engine: AsyncEngine = request.app.state.capture_engine
    async with engine.connect() as connection:
        yield connection


# scope="function": the connection goes back to the pool before the answer, like DbDep.
AutocommitDep = Annotated[AsyncConnection, Depends(get_autocommit_connection, scope="function")]
