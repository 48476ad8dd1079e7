"""Project keys stored as `/C:/...` become the Windows key `C:\\...`

A Windows path after slashes (a file URI's path, `/c:/Users/...`, as VS Code's `uri.path`
gives it) was kept as the POSIX key `/C:/Users/...` by every body and query, while the
context's path form (`/api/context//C:/Users/...`) read it as `C:\\Users\\...`: a project a client
stored under the one was not found by the other. `app.projects.canonical_project` now drops the
slashes, so both read `C:\\Users\\...`; this moves the rows stored under the old keys there.

Where both spellings hold the same thing, one row stays: of two memories with one scope, session
and key, the later written (its versions and its chunk go with the other); of two indexed files
with one path, the later indexed; the daily LLM usage of both is added up. The downgrade leaves
the keys folded: which rows were sent as `/C:/...` is not kept.

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
    keys: set[str] = set()
    for table in TABLES:
        rows = bind.execute(
            sa.text(f"SELECT DISTINCT project_path FROM {table} WHERE project_path ~ :slashed"),
            {"slashed": SLASHED_WINDOWS},
        )
        keys |= {row[0] for row in rows}
    if not keys:
        return
    op.execute("CREATE TEMPORARY TABLE project_folds (old text PRIMARY KEY, new text NOT NULL)")
    bind.execute(
        sa.text("INSERT INTO project_folds (old, new) VALUES (:old, :new)"),
        [{"old": key, "new": fold(key)} for key in sorted(keys)],
    )
    # Of two memories with one scope, session and key, the later written; of two indexed files
    # with one path, the later indexed.
    for table, group, written in (
        ("memories", "scope, session_id, key", "updated_at"),
        ("memory_files", "path", "indexed_at"),
    ):
        op.execute(
            _DEDUPLICATE.format(
                table=table,
                id="id",
                group=group,
                order_columns=written,
                order=f"{written} DESC, id",
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
