"""Engines and sessions: async for the API and worker, sync for Alembic and admin commands."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app import exactjson
from app.config import Settings, SettingsError
from app.db.alive import usable
from app.db.embedded import start_embedded_postgres
from app.search.queries import SCAN_DEFAULTS, SCAN_DEFAULTS_FLAG


def resolve_database_url(settings: Settings) -> str:
    """DATABASE_URL when set, else the embedded server under AGMEM_HOME (started on demand)."""
    if settings.database_url:
        return settings.database_url
    return start_embedded_postgres(settings.pgdata)


def sqlalchemy_url(url: str) -> str:
    """Normalise any postgres URL to the psycopg 3 driver SQLAlchemy should use."""
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise SettingsError(f"invalid setting DATABASE_URL: {error}") from None
    # Any driver a URL names (pg8000, asyncpg, psycopg2...): the app speaks psycopg 3 only, and
    # the settings check already accepted every postgresql+driver:// form.
    if parsed.drivername.split("+", 1)[0] in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


# Every connection works in UTC, whatever the server's `timezone` or the client's PGTZ says:
# timestamptz values come back in the session's zone, and the API promises UTC times. A SET after
# connecting, because PGTZ overrides a startup `-c TimeZone=UTC`.
SET_UTC = "SET TIME ZONE 'UTC'"


def make_async_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    engine = create_async_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        pool_recycle=1800,
        connect_args={"connect_timeout": 5, "application_name": "agmem"},
        # A statement's parameters are the users' text (an observation, a summary, a file's
        # chunk, a memory's value): SQLAlchemy's error text quoted them into every log line
        # and traceback of a failed statement, and into the worker's `last_error`.
        hide_parameters=True,
        # A jsonb integer of more than 4,300 digits (stored by SQL or an older build) made
        # `json.loads` raise in every read of its row: a 500 for the memory, its list, a write.
        json_deserializer=exactjson.loads_stored,
        json_serializer=exactjson.dumps,  # and writes it back (`json.dumps` raised too)
    )
    event.listen(engine.sync_engine, "connect", _set_scan_defaults)
    event.listen(engine.sync_engine, "checkout", _check_backend)
    return engine


def _check_backend(dbapi_connection: Any, connection_record: Any, connection_proxy: Any) -> None:
    """Hand out no connection whose backend went away while it sat in the pool.

    A terminated backend (`pg_terminate_backend`, Postgres restarting its backends after the OOM
    killer took one, an external server restarted) left a connection that failed the next
    request given it: a 503 for health, session lists, observation reads. `usable` reads what
    arrived meanwhile, with no round trip (`pool_pre_ping` sends a query each checkout). On a
    DisconnectionError the pool reconnects the same slot and checks out again; a connection
    just made is not checked again, as pre-ping skips it: the pool gives up after a second
    failed check with an error no handler knows (a 500), where a connection whose backend went
    that fast fails its query as any other would (a 503)."""
    if connection_record.info.pop(_JUST_CONNECTED, False):
        return
    if not usable(dbapi_connection.driver_connection):
        raise DisconnectionError("the connection's backend went away while it was idle")


# Set by `connect`, taken by the `checkout` right after it.
_JUST_CONNECTED = "agmem_just_connected"


def _set_scan_defaults(dbapi_connection: Any, connection_record: Any) -> None:
    """Session-level UTC and HNSW scan settings, so searches need not set them per transaction."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"{SET_UTC}; {SCAN_DEFAULTS}")
    finally:
        cursor.close()
    dbapi_connection.commit()  # a SET inside a transaction rolled back at check-in would vanish
    connection_record.info[SCAN_DEFAULTS_FLAG] = True
    connection_record.info[_JUST_CONNECTED] = True


def make_sync_engine(url: str) -> Engine:
    engine = create_engine(
        sqlalchemy_url(url),
        pool_pre_ping=True,
        connect_args={"connect_timeout": 5, "application_name": "agmem-admin"},
    )
    event.listen(engine, "connect", _set_utc)
    return engine


def _set_utc(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(SET_UTC)
    finally:
        cursor.close()
    dbapi_connection.commit()


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def sessionmaker_engine(sessionmaker: async_sessionmaker[AsyncSession]) -> AsyncEngine:
    """The engine `sessionmaker` is bound to."""
    bind = sessionmaker.kw.get("bind")
    if not isinstance(bind, AsyncEngine):
        raise TypeError("the sessionmaker is not bound to an AsyncEngine")
    return bind


def sessionmaker_url(sessionmaker: async_sessionmaker[AsyncSession]) -> str:
    """The database URL (password included) of the engine `sessionmaker` is bound to."""
    return sessionmaker_engine(sessionmaker).url.render_as_string(hide_password=False)


@asynccontextmanager
async def transaction(
    sessionmaker: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    """One unit of work: commit on success, roll back on any error."""
    async with sessionmaker() as session, session.begin():
        yield session
