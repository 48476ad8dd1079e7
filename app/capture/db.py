"""The capture hot path's own connection pool: raw psycopg, autocommit, no reset on return.

`observe` and `observe/result` each write with one self-contained statement (a CTE that checks
the session, touches it and inserts or updates), atomic by itself. On an autocommit connection
that is one round trip, where a transaction costs BEGIN, the statement and COMMIT; the answer is
still sent only after the statement, and so its commit, has returned.

The pool is psycopg's own rather than a SQLAlchemy engine: for these two statements SQLAlchemy
adds its connection checkout, statement compilation and result wrapping, which in the profile
cost more CPU per request than psycopg's whole round trip. The statements stay the `text()`
objects of `queries` (shared with the ORM-session callers, e.g. the Gemini proxy): `RawConnection`
translates their `:name` parameters to psycopg's `%(name)s` once and caches the result.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import lru_cache
from typing import Any

from fastapi import FastAPI, Request
from psycopg import AsyncConnection
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import TextClause
from sqlalchemy.engine import make_url

from app.db.engine import sqlalchemy_url
from app.state import AppState

# `:name` binds, not the `::type` casts around them.
_BIND = re.compile(r"(?<![:\w]):(\w+)")

Conn = AsyncConnection[Any]
RawPool = AsyncConnectionPool[Conn]


@lru_cache(maxsize=64)
def psycopg_sql(sql: str) -> str:
    """A `text()` statement's SQL with `:name` binds as psycopg's `%(name)s` (and `%` escaped)."""
    return _BIND.sub(r"%(\1)s", sql.replace("%", "%%"))


class RawResult:
    """The part of SQLAlchemy's `Result` the capture services use: `first()` and `one()`."""

    __slots__ = ("rows",)

    def __init__(self, rows: Sequence[Any]) -> None:
        self.rows = rows

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def one(self) -> Any:
        if len(self.rows) != 1:
            raise LookupError(f"expected one row, got {len(self.rows)}")
        return self.rows[0]


class RawConnection:
    """A pooled psycopg connection that runs the capture `text()` statements."""

    __slots__ = ("connection",)

    def __init__(self, connection: Conn) -> None:
        self.connection = connection

    async def execute(
        self, query: TextClause, params: Mapping[str, Any] | None = None
    ) -> RawResult:
        cursor = await self.connection.execute(psycopg_sql(query.text), params)
        return RawResult(await cursor.fetchall() if cursor.description is not None else [])


def libpq_url(url: str) -> str:
    """The database URL as libpq takes it (no SQLAlchemy driver name)."""
    parsed = make_url(sqlalchemy_url(url)).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def make_capture_pool(url: str, *, pool_size: int) -> RawPool:
    return AsyncConnectionPool(
        libpq_url(url),
        # A fixed size: a request waits for a pooled connection rather than paying a new
        # Postgres backend (fork, auth, connect) under a burst.
        min_size=pool_size,
        max_size=pool_size,
        kwargs={
            "autocommit": True,
            "row_factory": namedtuple_row,
            "connect_timeout": 5,
            "application_name": "agmem-capture",
        },
        connection_class=AsyncConnection,
        timeout=30,
        max_lifetime=1800,
        open=False,
    )


@asynccontextmanager
async def capture_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's lifespan (the router's lifespan nests in it)."""
    state: AppState = app.state.agmem
    # Twice the shared pool: the hot routes are most of the traffic and hold a connection briefly.
    pool = make_capture_pool(state.database_url, pool_size=2 * state.settings.db_pool_size)
    # Not waiting for the connections: the app must start (and answer 503) with the database down.
    await pool.open(wait=False)
    app.state.capture_pool = pool
    try:
        yield
    finally:
        await pool.close()


@asynccontextmanager
async def capture_connection(request: Request) -> AsyncIterator[RawConnection]:
    """A connection of the running app's capture pool (set up by `capture_lifespan`)."""
    pool: RawPool = request.app.state.capture_pool
    async with pool.connection() as connection:
        yield RawConnection(connection)
