"""redaction_state: the privacy rules' version the stored rows were last redacted under

After an upgrade that adds a rule, the rows stored before it (sessions, observations, kv memories
and their history, index rows other than memory files') kept what it catches until someone ran
`agmem redact`. The worker now compares this row's `rules` with today's
`app.privacy.RULES_VERSION` and runs the pass in the background when they differ. The row starts
at NULL: a database upgraded to this revision holds rows redacted under unknown rules, so the
first worker rescans once (an empty database's pass costs a few queries).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "redaction_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rules", sa.String(length=16), nullable=True),
        sa.Column("redacted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claimed_by", sa.String(length=200), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_redaction_state")),
    )
    op.execute("INSERT INTO redaction_state (id) VALUES (1)")


def downgrade() -> None:
    op.drop_table("redaction_state")
