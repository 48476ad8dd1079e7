"""Whether a database is at this agmem's schema head, read without loading Alembic.

`agmem serve` checks this before migrating: Alembic, its scripts and the check of a database at
head cost ~0.2-0.5 s of a start (docs/benchmarks.md, "Startup"), for nothing on every start but
the first after an upgrade of agmem.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

VERSIONS = Path(__file__).resolve().parents[2] / "alembic" / "versions"

# Alembic's version table, in the schema the connection's search_path gives (alembic/env.py
# names none).
CURRENT_SQL = "SELECT version_num FROM alembic_version"


@cache
def script_head() -> str | None:
    """The revision of the migration scripts no other script revises, None unless exactly one
    (no scripts, or several heads: Alembic's upgrade says what is wrong)."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for script in VERSIONS.glob("*.py"):
        for node in ast.parse(script.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.AnnAssign | ast.Assign) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {target.id for target in targets if isinstance(target, ast.Name)}
            value = ast.literal_eval(node.value)
            if "revision" in names:
                revisions.add(value)
            elif "down_revision" in names and value is not None:
                revised |= {value} if isinstance(value, str) else set(value)
    heads = revisions - revised
    return heads.pop() if len(heads) == 1 else None


def at_head(database_url: str) -> bool:
    """Whether the database's version table holds this agmem's head, and only it."""
    head = script_head()
    if head is None:
        return False
    libpq = make_url(database_url).set(drivername="postgresql")
    try:
        with psycopg.connect(
            libpq.render_as_string(hide_password=False),
            autocommit=True,
            connect_timeout=5,
            application_name="agmem-admin",
        ) as connection:
            rows = connection.execute(CURRENT_SQL).fetchall()
    # No version table (a new database), or no answer: the upgrade that follows creates it, or
    # reports the failure as it always has.
    except psycopg.Error:
        return False
    return rows == [(head,)]
