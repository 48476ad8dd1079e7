"""memory_files.rules: the privacy rules' version a file's chunks were sanitized under

A file's chunks were re-made only when the file changed (or with `sync --force`): after an
upgrade that added a rule, a secret it catches stayed in the chunks of every unchanged file. A
sync now re-chunks a file whose `rules` differ from today's (`app.privacy.RULES_VERSION`); the
files indexed before this column (NULL) are re-chunked once, keeping the rows that come out the
same.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("memory_files", sa.Column("rules", sa.String(length=16), nullable=True))


def downgrade() -> None:
    op.drop_column("memory_files", "rules")
