"""memory_files.root, sync_runs.forget_dirs: a sync deletes only the files of its own roots

A sync deleted every indexed file of the project it did not find, so a sync of the default
memory root that forgot a custom root's flag (`agmem sync` after `agmem sync --memory-dir
notes`, or the API without `memoryDir`) dropped that root's chunks, which the next sync naming
it read and embedded again. Each file now records the folder it was found under (its memory
root, or its sessions folder: `source` says which), and a sync deletes only the missing files
of the roots it was given. Another root's files go when a sync names it in `forget_dirs`
(`agmem sync --forget-dir`, `forgetDirs` in `POST /api/sync`), kept on the queued run.

Files indexed before this revision (root NULL) are the sync's whose listing would find them, as
their path says; each gets its root once a sync finds it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("memory_files", sa.Column("root", sa.Text(), nullable=True))
    op.add_column("sync_runs", sa.Column("forget_dirs", postgresql.ARRAY(sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column("sync_runs", "forget_dirs")
    op.drop_column("memory_files", "root")
