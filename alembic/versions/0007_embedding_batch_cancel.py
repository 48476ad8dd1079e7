"""embedding_batches: the cancel at Gemini of a job we stopped waiting for

A job closed because the project's embedding model changed (`superseded: …`) was left to run at
Gemini to its end, paid for, its result never read. The sync now cancels it, and these columns
keep where that stands, so that a cancel that failed (network, 5xx, 429, no key) is tried again
by a later sync, and one Gemini answers "already ended" is not tried for ever:

- `cancel_status`: NULL (nothing to cancel), `pending`, `cancelled`, `ended` (the job had ended
  at Gemini: nothing to cancel), `expired` (48 hours after its creation: Gemini ends every job
  by then);
- `cancel_requested_at`, `cancel_settled_at` (when it left `pending`), `cancel_error` (the last
  attempt's failure, or why it settled without a cancel).

Jobs superseded before this revision, with a remote name, are left `pending`: the next sync of
their project cancels them, or settles them as `expired` without a call when they are older than
48 hours. The downgrade keeps a settled cancel's outcome in `last_error`, and an upgrade after
it settles that job again (`cancel_settled_at` then being the job's last update), rather than
asking Gemini again.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# The note the downgrade appends to `last_error` for a settled cancel.
_SETTLED_NOTE = "; cancel (cancelled|ended|expired)(: |$)"


def upgrade() -> None:
    op.add_column("embedding_batches", sa.Column("cancel_status", sa.String(20), nullable=True))
    op.add_column(
        "embedding_batches",
        sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.add_column(
        "embedding_batches",
        sa.Column("cancel_settled_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.add_column("embedding_batches", sa.Column("cancel_error", sa.Text(), nullable=True))
    op.create_index(
        "ix_embedding_batches_cancel_pending",
        "embedding_batches",
        ["project_path"],
        postgresql_where=sa.text("cancel_status = 'pending'"),
    )
    # A job this revision's downgrade left its settled cancel noted on (`…; cancel ended: …`)
    # gets it back: taken for one never cancelled, it went back to `pending` and, cancelled,
    # was asked again.
    op.execute(
        "UPDATE embedding_batches SET cancel_status = substring(last_error FROM "
        f"'{_SETTLED_NOTE}'), cancel_requested_at = updated_at, cancel_settled_at = updated_at "
        f"WHERE status = 'failed' AND last_error ~ '{_SETTLED_NOTE}' "
        "AND provider_job IS NOT NULL"
    )
    op.execute(
        "UPDATE embedding_batches SET cancel_status = 'pending', cancel_requested_at = updated_at "
        "WHERE status = 'failed' AND last_error LIKE 'superseded: %' "
        "AND provider_job IS NOT NULL AND cancel_status IS NULL"
    )


def downgrade() -> None:
    # A settled cancel's outcome stays readable where the old schema keeps a job's story.
    op.execute(
        "UPDATE embedding_batches SET last_error = concat_ws('; ', last_error, "
        "'cancel ' || cancel_status || coalesce(': ' || cancel_error, '')) "
        "WHERE cancel_status IS NOT NULL AND cancel_status <> 'pending'"
    )
    op.drop_index("ix_embedding_batches_cancel_pending", table_name="embedding_batches")
    op.drop_column("embedding_batches", "cancel_error")
    op.drop_column("embedding_batches", "cancel_settled_at")
    op.drop_column("embedding_batches", "cancel_requested_at")
    op.drop_column("embedding_batches", "cancel_status")
