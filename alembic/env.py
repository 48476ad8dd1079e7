"""Alembic environment: the URL comes from the caller, DATABASE_URL, or the embedded server."""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

import structlog
from sqlalchemy import Connection, text

from alembic import context
from app.config import get_settings
from app.db.engine import make_sync_engine, resolve_database_url
from app.db.migrate import MIGRATION_LOCK
from app.db.models import Base
from app.db.vector_index import HNSW_INDEX_PREFIX

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    # Per-model HNSW indexes are created at run time when a model is first used, so they are
    # not in the ORM metadata and must not show up as drift.
    return not (type_ == "index" and reflected and (name or "").startswith(HNSW_INDEX_PREFIX))


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=include_object,
        compare_type=True,
        compare_server_default=False,
    )


log = structlog.get_logger(__name__)


def _run_locked(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        key = {"key": MIGRATION_LOCK}
        if not connection.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), key).scalar():
            # A start blocked behind another process's migration was silent (6 s in the ops16
            # review; for ever behind a holder that hung).
            log.warning(
                "migrate.waiting",
                reason="another process is migrating the database: waiting for it",
            )
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), key)
        context.run_migrations()


def run_migrations_online() -> None:
    connection: Connection | None = config.attributes.get("connection")
    if connection is not None:
        _run_locked(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or resolve_database_url(get_settings())
    engine = make_sync_engine(url)
    try:
        with engine.connect() as conn:
            _run_locked(conn)
    finally:  # a failed migration (an unknown revision) left its connection open until a GC
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run against a database")
run_migrations_online()
