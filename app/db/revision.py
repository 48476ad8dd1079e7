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


# The names Alembic reads from a script's module; the parse reads them only in the shape Alembic's
# script template writes them (`revision: str = "0007"`, or without the annotation).
NAMES = ("revision", "down_revision")


class Unread(Exception):
    """A script in a shape this parse does not read: only Alembic can say what it means."""


@cache
def script_head() -> str | None:
    return script_head_in(VERSIONS)


def script_head_in(folder: Path) -> str | None:
    """The revision of the migration scripts in `folder` no other script revises, or None
    whenever it is not certain (a script it cannot read, a revision twice, several heads, a
    missing parent): None costs the full upgrade, a wrong head would skip a migration."""
    parents: dict[str, tuple[str, ...]] = {}
    # What Alembic loads from the folder: it skips a package's __init__.py and editors' lock files.
    scripts = [
        path
        for path in folder.glob("*.py")
        if path.name != "__init__.py" and not path.name.startswith(".#")
    ]
    for path in scripts:
        try:
            revision, down = declared(ast.parse(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, SyntaxError, RecursionError, MemoryError, Unread):
            return None
        if revision in parents:
            return None
        parents[revision] = down
    revised = {parent for down in parents.values() for parent in down}
    if not revised <= parents.keys():
        return None
    heads = parents.keys() - revised
    return heads.pop() if len(heads) == 1 else None


def declared(module: ast.Module) -> tuple[str, tuple[str, ...]]:
    """A script's revision and the revisions it revises, from its top-level `name = literal`
    assignments; Unread if either is bound in any other way, twice, or not at all."""
    values: dict[str, object] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id not in NAMES:
            continue
        if target.id in values:
            raise Unread
        try:
            values[target.id] = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise Unread from None
    # Every binding of the names anywhere in the module (tuple targets, `for`, imports, defs,
    # nested statements) must be one of those read above.
    if sorted(bound_names(module)) != sorted(values):
        raise Unread
    revision, down = values.get("revision"), values.get("down_revision", ())
    if not isinstance(revision, str) or "down_revision" not in values:
        raise Unread
    if down is None:
        return revision, ()
    if isinstance(down, str):
        return revision, (down,)
    if isinstance(down, tuple | list) and all(isinstance(parent, str) for parent in down):
        return revision, tuple(down)
    raise Unread


def bound_names(module: ast.Module) -> list[str]:
    names: list[str] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.append(node.id)
        elif isinstance(node, ast.alias):
            names.append(node.asname or node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.extend(node.names)
    return [name for name in names if name in NAMES]


def at_head(database_url: str) -> bool:
    """Whether the database's version table holds this agmem's head, and only it.

    Raises psycopg.OperationalError when no connection can be made: the upgrade would wait its
    own connect timeout (5 s) for the same failure, so a database that is down is reported after
    one wait, not two (`database unreachable`, app/cli/common.py)."""
    head = script_head()
    if head is None:
        return False
    libpq = make_url(database_url).set(drivername="postgresql")
    try:
        connection = psycopg.connect(
            libpq.render_as_string(hide_password=False),
            autocommit=True,
            connect_timeout=5,
            application_name="agmem-admin",
        )
    except psycopg.OperationalError:
        raise
    # A URL libpq refuses to read: the upgrade's reading of it says what is wrong.
    except psycopg.Error:
        return False
    with connection:
        try:
            rows = connection.execute(CURRENT_SQL).fetchall()
        # No version table (a new database): the upgrade that follows creates it.
        except psycopg.Error:
            return False
    return rows == [(head,)]
