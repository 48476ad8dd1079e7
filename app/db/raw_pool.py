"""Plain psycopg connections for the hot paths that skip SQLAlchemy (capture writes, memory reads).

One place for how such a pool connects, so the two pools differ only in the choices their owners
explain: how many connections stay open and which session settings they carry.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.engine import make_url

from app.db.engine import SET_UTC, sqlalchemy_url

Conn = AsyncConnection[Any]
RawPool = AsyncConnectionPool[Conn]


def libpq_url(url: str) -> str:
    """The database URL as libpq takes it (no SQLAlchemy driver name)."""
    parsed = make_url(sqlalchemy_url(url)).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def make_raw_pool(
    url: str,
    *,
    application_name: str,
    min_size: int,
    max_size: int,
    options: str | None = None,
    timeout: float = 30,
) -> RawPool:
    """An unopened pool of autocommit connections; the owner opens it without waiting."""
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": 5,
        "application_name": application_name,
    }
    if options is not None:
        kwargs["options"] = options
    return AsyncConnectionPool(
        libpq_url(url),
        min_size=min_size,
        max_size=max_size,
        kwargs=kwargs,
        connection_class=AsyncConnection,
        configure=_set_utc,
        timeout=timeout,
        max_lifetime=1800,
        open=False,
    )


async def connect(url: str, *, application_name: str, options: str | None = None) -> Conn:
    """One autocommit connection of its own, outside any pool (the caller closes it)."""
    kwargs: dict[str, Any] = {"options": options} if options is not None else {}
    return await AsyncConnection.connect(
        libpq_url(url),
        autocommit=True,
        connect_timeout=5,
        application_name=application_name,
        **kwargs,
    )


async def _set_utc(connection: Conn) -> None:
    # Autocommit connections: the SET stays for the connection's life (see app/db/engine.py).
    await connection.execute(SET_UTC)
