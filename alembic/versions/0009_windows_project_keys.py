"""Project keys stored as `/C:/...` become the Windows key `C:\\...`

A Windows path after slashes (a file URI's path, `/c:/Users/...`, as VS Code's `uri.path`
gives it) was kept as the POSIX key `/C:/Users/...` by every body and query, while the
context's path form (`/api/context//C:/Users/...`) read it as `C:\\Users\\...`: a project a client
stored under the one was not found by the other. `app.projects.canonical_project` now drops the
slashes, so both read `C:\\Users\\...`; this moves the rows stored under the old keys there.

Where both spellings hold the same thing: of two memories with one scope, session and key, the
later written keeps the key and the other keeps its value under `<key> (duplicate spelling)`
(`(duplicate spelling 2)`, ... when that is taken; the key cut short to stay within its bounds),
as migration 0010 does for a key's two Unicode spellings, so that no value is lost; of two
indexed files with one path, the later indexed stays (a sync re-indexes it); the daily LLM usage
of both is added up. The downgrade leaves the keys folded: which rows were sent as `/C:/...` is
not kept.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

import ntpath
import re
from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Every table with a project_path, as of this revision.
TABLES = (
    "sessions",
    "observations",
    "memory_files",
    "memory_chunks",
    "memories",
    "memory_versions",
    "sync_runs",
    "embedding_batches",
    "llm_usage",
)
SLASHED_WINDOWS = r"^/+[A-Za-z]:[\\/]"


def fold(path: str) -> str:
    """canonical_project of this revision for such a key (frozen here: the app's may change)."""
    folded = ntpath.normpath(re.sub(r"^/+", "", path))
    return folded[0].upper() + folded[1:]


# The key's bounds as they are at this revision (app.memories.schemas.MAX_KEY_LENGTH,
# app.api.limits.KEY_MAX_BYTES): a longer name could not be read or deleted by its key.
MAX_KEY_LENGTH = 500
KEY_MAX_BYTES = 800

# The memories of both spellings' places, each with its place after the move and its rank among
# those of one key there (1: the later written, which keeps the key).
_MEMORY_TWINS = """
SELECT m.id, m.scope, m.session_id, m.key, COALESCE(f.new, m.project_path) AS folded,
    row_number() OVER (
        PARTITION BY COALESCE(f.new, m.project_path), m.scope, m.session_id, m.key
        ORDER BY m.updated_at DESC, m.id
    ) AS n
FROM memories m LEFT JOIN project_folds f ON f.old = m.project_path
WHERE m.project_path IN (SELECT old FROM project_folds UNION SELECT new FROM project_folds)
ORDER BY n
"""


def _duplicate_name(stem: str, number: int) -> str:
    """`stem` with the suffix of its `number`-th twin, the stem cut short (by whole characters)
    when the name would pass the key's bounds."""
    suffix = " (duplicate spelling)" if number == 1 else f" (duplicate spelling {number})"
    stem = stem[: MAX_KEY_LENGTH - len(suffix)]
    while len((stem + suffix).encode()) > KEY_MAX_BYTES:
        stem = stem[:-1]
    return stem + suffix


def _rename_memory_twins(bind: sa.Connection) -> None:
    """Give each memory but the later written of one key in one place after the move a name of
    its own, so that the move breaks no unique key and loses no value."""
    rows = bind.execute(sa.text(_MEMORY_TWINS)).all()
    taken: dict[tuple[str, str, str], set[str]] = {}
    for _, scope, session_id, key, folded, _ in rows:
        taken.setdefault((folded, scope, session_id), set()).add(key)
    for memory_id, scope, session_id, key, folded, rank in rows:
        if rank == 1:
            continue
        keys = taken[(folded, scope, session_id)]
        number = 1
        while (name := _duplicate_name(key, number)) in keys:
            number += 1
        keys.add(name)
        bind.execute(
            sa.text("UPDATE memories SET key = :key WHERE id = :id"),
            {"key": name, "id": memory_id},
        )


# One row of each group that both spellings' rows make: `order` says which stays (the first).
_DEDUPLICATE = """
WITH keyed AS (
    SELECT t.{id} AS id, {group}, COALESCE(f.new, t.project_path) AS folded, {order_columns}
    FROM {table} t LEFT JOIN project_folds f ON f.old = t.project_path
    WHERE t.project_path IN (SELECT old FROM project_folds UNION SELECT new FROM project_folds)
), ranked AS (
    SELECT id, row_number() OVER (PARTITION BY folded, {group} ORDER BY {order}) AS n FROM keyed
)
DELETE FROM {table} WHERE {id} IN (SELECT id FROM ranked WHERE n > 1)
"""


def upgrade() -> None:
    bind = op.get_bind()
    move_keys(bind, {key: fold(key) for key in stored_keys(bind, SLASHED_WINDOWS)})


def stored_keys(bind: sa.Connection, pattern: str) -> set[str]:
    """The project keys of every table that match the regular expression `pattern`."""
    keys: set[str] = set()
    for table in TABLES:
        rows = bind.execute(
            sa.text(f"SELECT DISTINCT project_path FROM {table} WHERE project_path ~ :pattern"),
            {"pattern": pattern},
        )
        keys |= {row[0] for row in rows}
    return keys


def move_keys(bind: sa.Connection, folds: dict[str, str]) -> None:
    """Move the rows of each old key of `folds` to its new key (migration 0011 moves its own
    keys with it: one folder's spellings meet the same way)."""
    if not folds:
        return
    op.execute("CREATE TEMPORARY TABLE project_folds (old text PRIMARY KEY, new text NOT NULL)")
    bind.execute(
        sa.text("INSERT INTO project_folds (old, new) VALUES (:old, :new)"),
        [{"old": old, "new": new} for old, new in sorted(folds.items())],
    )
    _rename_memory_twins(bind)
    # Of two indexed files with one path, the later indexed: the file is on disk, a sync
    # indexes it again.
    op.execute(
        _DEDUPLICATE.format(
            table="memory_files",
            id="id",
            group="path",
            order_columns="indexed_at",
            order="indexed_at DESC, id",
        )
    )
    op.execute(
        "INSERT INTO llm_usage (day, project_path, model, requests, input_tokens, output_tokens) "
        "SELECT u.day, f.new, u.model, sum(u.requests), sum(u.input_tokens), "
        "sum(u.output_tokens) FROM llm_usage u JOIN project_folds f ON f.old = u.project_path "
        "GROUP BY u.day, f.new, u.model ON CONFLICT (day, project_path, model) DO UPDATE SET "
        "requests = llm_usage.requests + EXCLUDED.requests, "
        "input_tokens = llm_usage.input_tokens + EXCLUDED.input_tokens, "
        "output_tokens = llm_usage.output_tokens + EXCLUDED.output_tokens"
    )
    op.execute("DELETE FROM llm_usage u USING project_folds f WHERE u.project_path = f.old")
    # A run is read from its folder, the key when NULL: a queued run keyed `C:\\...` then read
    # a folder a POSIX server has not. The folder is the path as it was sent.
    op.execute(
        "UPDATE sync_runs t SET folder = f.old FROM project_folds f "
        "WHERE t.project_path = f.old AND t.folder IS NULL"
    )
    for table in TABLES:
        if table != "llm_usage":
            op.execute(
                f"UPDATE {table} t SET project_path = f.new FROM project_folds f "
                "WHERE t.project_path = f.old"
            )
    op.execute("DROP TABLE project_folds")


def downgrade() -> None:
    pass
