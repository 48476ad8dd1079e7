"""redaction_state.generation: which build's rules redacted the stored rows, in order

Two builds whose rules differ on one database (a rolling upgrade, a dev checkout beside an
installed agmem) each found the row's digest "not mine" and redid the whole pass against each
other at every upkeep interval. The digest says only "other"; the generation, an integer that
grows with every change of the rules (`app.privacy.RULES_GENERATION`), says "older": only a build
with newer rules claims the pass. NULL (every row before this revision) counts as older than any.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("redaction_state", sa.Column("generation", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("redaction_state", "generation")
