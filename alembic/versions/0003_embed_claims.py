"""memory_chunks.embed_claimed_until: the worker's claim on rows it is embedding

The worker locked the rows it embedded FOR UPDATE through the provider's call: a write of those
rows (a kv memory's PUT or DELETE) waited for Gemini. A lease instead splits the backlog between
lanes and workers without a lock held across the call.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "memory_chunks",
        sa.Column("embed_claimed_until", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("memory_chunks", "embed_claimed_until")
