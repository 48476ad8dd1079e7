"""Plain psycopg connections for the hot paths that skip SQLAlchemy (capture writes, memory reads).

One place for how such a pool connects, so the two pools differ only in the choices their owners
explain: how many connections stay open and which session settings they carry.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.engine import make_url

from app import exactjson
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
    return AsyncConnectionPool(
        libpq_url(url),
        min_size=min_size,
        max_size=max_size,
        kwargs=_connect_kwargs(application_name, options),
        connection_class=AsyncConnection,
        configure=_configure,
        timeout=timeout,
        max_lifetime=1800,
        open=False,
    )


async def connect(url: str, *, application_name: str, options: str | None = None) -> Conn:
    """One autocommit connection of its own, outside any pool (the caller closes it).

    Unlike the pools' connections it is not set to UTC: its one user, the sync, reads and writes
    no timestamps through it, and the SET would be a round trip on a small re-sync's critical
    path. A caller that reads `timestamptz` values must `SET_UTC` first."""
    connection = await AsyncConnection.connect(
        libpq_url(url), **_connect_kwargs(application_name, options)
    )
    _read_exact_ints(connection)
    return connection


def _connect_kwargs(application_name: str, options: str | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": 5,
        "application_name": application_name,
    }
    if options is not None:
        kwargs["options"] = options
    return kwargs


async def _configure(connection: Conn) -> None:
    _read_exact_ints(connection)
    # Autocommit connections: the SET stays for the connection's life (see app/db/engine.py).
    await connection.execute(SET_UTC)


def _read_exact_ints(connection: Conn) -> None:
    # psycopg's jsonb loader is `json.loads`, which raised for an integer of more than 4,300
    # digits (a row written by SQL or an older build): every read of that memory was a 500.
    set_json_loads(exactjson.loads_stored, connection)
