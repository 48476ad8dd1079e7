"""sync_runs.folder: the project folder as the client spelled it, when that is not its key

A macOS client sends an NFD folder name; the key (app/projects.py) is NFC and names no folder on
disk, so the run must keep the spelling it reads apart from the key it stores.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("sync_runs", sa.Column("folder", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("sync_runs", "folder")
