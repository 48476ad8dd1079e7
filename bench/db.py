"""A throwaway migrated database for a benchmark run: BENCH_DATABASE_URL's server, else a private
embedded PostgreSQL in a temporary folder. The database is created for the run and dropped after."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psycopg
from sqlalchemy.engine import make_url

from app.db import migrate
from bench.scratch import scratch_folder


def libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextlib.contextmanager
def bench_database(prefix: str = "agmem_bench", *, upgrade: bool = True) -> Iterator[str]:
    with contextlib.ExitStack() as stack:
        server_url = os.environ.get("BENCH_DATABASE_URL")
        if not server_url:
            from app.db.embedded import start_embedded_postgres

            folder = stack.enter_context(scratch_folder("agmem-bench-pg-"))
            os.chmod(folder, 0o755)
            # Its server is stopped while its folder exists, then the folder goes (`remove`).
            server_url = start_embedded_postgres(folder / "pgdata", cleanup_mode="delete")
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(libpq(server_url), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        try:
            if upgrade:
                migrate.upgrade(url)
            yield url
        finally:
            with psycopg.connect(libpq(server_url), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
