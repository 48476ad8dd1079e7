"""initial schema: every table the service needs, the extensions, and the search indexes

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import pgvector.sqlalchemy
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The default (offline) embedding model gets its HNSW index now; other models get theirs when
# first used (app/db/vector_index.py builds the same statement).
DEFAULT_MODEL = "local:wordllama-l2_supercat:256"
DEFAULT_MODEL_INDEX = "ix_memory_chunks_hnsw_local_wordllama_l2_supercat_256"


# The worker LISTENs on this channel; each trigger names the queue that has new work, so an idle
# worker wakes at once instead of at its next poll. Triggers are not ORM metadata, so
# `alembic check` does not see them (app/worker/notify.py documents the same names).
WORK_CHANNEL = "agmem_work"
WORK_TRIGGERS = (
    # The capture writer's connections set agmem.notify_by_batch and send one NOTIFY per batch
    # themselves instead of one PL/pgSQL call per row (app/capture/db.py).
    (
        "observations",
        "observation",
        "AFTER INSERT OR UPDATE OF status",
        "NEW.status = 'captured' "
        "AND current_setting('agmem.notify_by_batch', true) IS DISTINCT FROM 'on'",
    ),
    ("sessions", "session", "AFTER INSERT OR UPDATE OF status", "NEW.status = 'ending'"),
    ("memory_chunks", "embed", "AFTER INSERT", "NEW.embedding IS NULL"),
    ("sync_runs", "sync", "AFTER INSERT OR UPDATE OF status", "NEW.status = 'queued'"),
)


def _create_work_triggers() -> None:
    op.execute(
        "CREATE OR REPLACE FUNCTION agmem_notify_work() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN PERFORM pg_notify('{WORK_CHANNEL}', TG_ARGV[0]); RETURN NULL; END $$"
    )
    for table, payload, timing, condition in WORK_TRIGGERS:
        # Postgres folds identical notifications within one transaction, so a bulk insert
        # sends one wake-up, not one per row.
        op.execute(
            f"CREATE TRIGGER agmem_notify_{table} {timing} ON {table} FOR EACH ROW "
            f"WHEN ({condition}) EXECUTE FUNCTION agmem_notify_work('{payload}')"
        )


def _drop_work_triggers() -> None:
    for table, _payload, _timing, _condition in WORK_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS agmem_notify_{table} ON {table}")
    op.execute("DROP FUNCTION IF EXISTS agmem_notify_work()")


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    # gen_random_uuid() is core since PostgreSQL 13; pgcrypto is created where the server ships it
    # (the pgvector image does, the embedded server does not) for digest() in ad-hoc SQL.
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pgcrypto') "
        "THEN CREATE EXTENSION IF NOT EXISTS pgcrypto; END IF; END $$"
    )
    op.create_table(
        "embedding_batches",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("project_path", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("provider_job", sa.Text(), nullable=True),
        sa.Column("hashes", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("status", sa.String(length=20), server_default="submitted", nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_embedding_batches")),
    )
    op.create_table(
        "llm_usage",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("project_path", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("requests", sa.Integer(), server_default="0", nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("day", "project_path", "model", name=op.f("pk_llm_usage")),
    )
    op.create_table(
        "memories",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("scope", sa.String(length=20), nullable=False),
        sa.Column("project_path", sa.Text(), server_default="", nullable=False),
        sa.Column("session_id", sa.String(length=200), server_default="", nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=True),
        sa.Column("updated_by", sa.String(length=200), nullable=True),
        sa.Column(
            "tags",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
        sa.Column("ttl", sa.Integer(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("version", sa.Integer(), server_default="1", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("accessed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("access_count", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memories")),
        sa.UniqueConstraint(
            "scope",
            "project_path",
            "session_id",
            "key",
            name=op.f("uq_memories_scope_project_path_session_id_key"),
        ),
    )
    op.create_index(
        "ix_memories_expires_at",
        "memories",
        ["expires_at"],
        unique=False,
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.create_index(
        "ix_memories_project_path_key", "memories", ["project_path", "key"], unique=False
    )
    op.create_index("ix_memories_tags", "memories", ["tags"], unique=False, postgresql_using="gin")
    op.create_table(
        "memory_embedding_cache",
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("hash", "model", name=op.f("pk_memory_embedding_cache")),
    )
    op.create_table(
        "memory_files",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("project_path", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("mtime", sa.Float(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("chunk_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "indexed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_files")),
        sa.UniqueConstraint("project_path", "path", name=op.f("uq_memory_files_project_path_path")),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("project_path", sa.Text(), nullable=False),
        sa.Column("user_prompt", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(length=200), nullable=True),
        sa.Column("metadata", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("status", sa.String(length=20), server_default="active", nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("summary_generated_by", sa.String(length=100), nullable=True),
        sa.Column("total_observations", sa.Integer(), server_default="0", nullable=False),
        sa.Column("tokens_saved", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "last_activity_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("summarized_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_by", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_index(
        "ix_sessions_pending_summary",
        "sessions",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'ending'"),
    )
    op.create_index(
        "ix_sessions_project_path_created_at",
        "sessions",
        ["project_path", "created_at"],
        unique=False,
    )
    op.create_table(
        "sync_runs",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("project_path", sa.Text(), nullable=False),
        sa.Column("memory_dir", sa.Text(), nullable=True),
        sa.Column("sessions_dir", sa.Text(), nullable=True),
        sa.Column("force", sa.Boolean(), server_default="false", nullable=False),
        sa.Column("reembed", sa.Boolean(), server_default="false", nullable=False),
        sa.Column("status", sa.String(length=20), server_default="queued", nullable=False),
        sa.Column(
            "stats", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False
        ),
        sa.Column(
            "errors", postgresql.JSONB(astext_type=sa.Text()), server_default="[]", nullable=False
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_by", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sync_runs")),
    )
    op.create_index(
        "ix_sync_runs_project_path_created_at",
        "sync_runs",
        ["project_path", "created_at"],
        unique=False,
    )
    op.create_index(
        "ix_sync_runs_queued",
        "sync_runs",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'queued'"),
    )
    op.create_table(
        "memory_versions",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("memory_id", sa.UUID(), nullable=False),
        sa.Column("project_path", sa.Text(), server_default="", nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("written_by", sa.String(length=200), nullable=True),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["memory_id"],
            ["memories.id"],
            name=op.f("fk_memory_versions_memory_id_memories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_versions")),
    )
    op.create_index(
        "ix_memory_versions_memory_id_version",
        "memory_versions",
        ["memory_id", "version"],
        unique=False,
    )
    op.create_table(
        "observations",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("project_path", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("function_name", sa.String(length=300), nullable=False),
        sa.Column(
            "function_args",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default="{}",
            nullable=False,
        ),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("observation_type", sa.String(length=30), nullable=False),
        sa.Column(
            "entities", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False
        ),
        sa.Column("status", sa.String(length=20), server_default="pending", nullable=False),
        sa.Column("compressed_data", sa.Text(), nullable=True),
        sa.Column("generated_by", sa.String(length=100), nullable=True),
        sa.Column("original_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("compressed_tokens", sa.Integer(), nullable=True),
        sa.Column("tokens_saved", sa.Integer(), nullable=True),
        sa.Column("args_bytes", sa.Integer(), server_default="0", nullable=False),
        sa.Column("result_bytes", sa.Integer(), server_default="0", nullable=False),
        sa.Column("truncated", sa.Boolean(), server_default="false", nullable=False),
        sa.Column(
            "observed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("result_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("compressed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_by", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_observations_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_observations")),
    )
    op.create_index(
        "ix_observations_pending_match",
        "observations",
        ["session_id", "function_name", "seq"],
        unique=False,
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_observations_project_path_created_at",
        "observations",
        ["project_path", "created_at"],
        unique=False,
    )
    op.create_index(
        "ix_observations_session_id_seq", "observations", ["session_id", "seq"], unique=False
    )
    op.create_index(
        "ix_observations_to_compress",
        "observations",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'captured'"),
    )
    # Raw tool payloads are kept out of line and uncompressed: pglz compressing each 1-20 KB
    # payload was ~40% of Postgres's CPU per capture request (0.62 -> 0.36 ms measured), for about
    # twice the disk of these two columns. The embedded server is built without lz4.
    op.execute(
        "ALTER TABLE observations ALTER COLUMN function_args SET STORAGE EXTERNAL, "
        "ALTER COLUMN result SET STORAGE EXTERNAL"
    )
    op.create_table(
        "memory_chunks",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("project_path", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("file_id", sa.BigInteger(), nullable=True),
        sa.Column("file_path", sa.Text(), nullable=True),
        sa.Column("start_line", sa.Integer(), nullable=True),
        sa.Column("end_line", sa.Integer(), nullable=True),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("observation_id", sa.String(length=200), nullable=True),
        sa.Column("memory_id", sa.UUID(), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("search_terms", sa.Text(), nullable=True),
        sa.Column("embedding", pgvector.sqlalchemy.vector.VECTOR(), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("embed_attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("embed_error", sa.Text(), nullable=True),
        sa.Column(
            "tsv",
            postgresql.TSVECTOR(),
            sa.Computed(
                "to_tsvector('english'::regconfig, content) || "
                "to_tsvector('english'::regconfig, COALESCE(search_terms, ''::text))",
                persisted=True,
            ),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["file_id"],
            ["memory_files.id"],
            name=op.f("fk_memory_chunks_file_id_memory_files"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["memory_id"],
            ["memories.id"],
            name=op.f("fk_memory_chunks_memory_id_memories"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["observation_id"],
            ["observations.id"],
            name=op.f("fk_memory_chunks_observation_id_observations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_memory_chunks_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_chunks")),
        # Rows inline up to a page: a ~2.9 KB chunk went over the default 2 KB target, and
        # compressing and moving its values out of line cost ~18 us of server CPU a row.
        postgresql_with={"toast_tuple_target": 8160},
    )
    # Owner columns are NULL on most rows (a row has one or two owners): partial indexes.
    for owner in ("file_id", "memory_id", "observation_id"):
        _create_owner_index(owner)
    op.create_index(
        "ix_memory_chunks_project_path_source",
        "memory_chunks",
        ["project_path", "source"],
        unique=False,
    )
    _create_owner_index("session_id")
    op.create_index(
        "ix_memory_chunks_tsv", "memory_chunks", ["tsv"], unique=False, postgresql_using="gin"
    )
    op.create_index(
        "ix_memory_chunks_unembedded",
        "memory_chunks",
        ["id"],
        unique=False,
        postgresql_where=sa.text("embedding IS NULL"),
    )
    op.execute(
        f"CREATE INDEX {DEFAULT_MODEL_INDEX} ON memory_chunks "
        "USING hnsw ((embedding::halfvec(256)) halfvec_cosine_ops) "
        f"WITH (m = 16, ef_construction = 64) WHERE model = '{DEFAULT_MODEL}'"
    )
    _create_work_triggers()


def _create_owner_index(column: str) -> None:
    op.create_index(
        f"ix_memory_chunks_{column}",
        "memory_chunks",
        [column],
        unique=False,
        postgresql_where=sa.text(f"{column} IS NOT NULL"),
    )


def downgrade() -> None:
    _drop_work_triggers()
    # Per-model HNSW indexes (this one and any created at run time) go with the table.
    op.drop_index(
        "ix_memory_chunks_unembedded",
        table_name="memory_chunks",
        postgresql_where=sa.text("embedding IS NULL"),
    )
    op.drop_index("ix_memory_chunks_tsv", table_name="memory_chunks", postgresql_using="gin")
    op.drop_index("ix_memory_chunks_session_id", table_name="memory_chunks")
    op.drop_index("ix_memory_chunks_project_path_source", table_name="memory_chunks")
    op.drop_index("ix_memory_chunks_observation_id", table_name="memory_chunks")
    op.drop_index("ix_memory_chunks_memory_id", table_name="memory_chunks")
    op.drop_index("ix_memory_chunks_file_id", table_name="memory_chunks")
    op.drop_table("memory_chunks")
    op.drop_index(
        "ix_observations_to_compress",
        table_name="observations",
        postgresql_where=sa.text("status = 'captured'"),
    )
    op.drop_index("ix_observations_session_id_seq", table_name="observations")
    op.drop_index("ix_observations_project_path_created_at", table_name="observations")
    op.drop_index(
        "ix_observations_pending_match",
        table_name="observations",
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.drop_table("observations")
    op.drop_index("ix_memory_versions_memory_id_version", table_name="memory_versions")
    op.drop_table("memory_versions")
    op.drop_index(
        "ix_sync_runs_queued", table_name="sync_runs", postgresql_where=sa.text("status = 'queued'")
    )
    op.drop_index("ix_sync_runs_project_path_created_at", table_name="sync_runs")
    op.drop_table("sync_runs")
    op.drop_index("ix_sessions_project_path_created_at", table_name="sessions")
    op.drop_index(
        "ix_sessions_pending_summary",
        table_name="sessions",
        postgresql_where=sa.text("status = 'ending'"),
    )
    op.drop_table("sessions")
    op.drop_table("memory_files")
    op.drop_table("memory_embedding_cache")
    op.drop_index("ix_memories_tags", table_name="memories", postgresql_using="gin")
    op.drop_index("ix_memories_project_path_key", table_name="memories")
    op.drop_index(
        "ix_memories_expires_at",
        table_name="memories",
        postgresql_where=sa.text("expires_at IS NOT NULL"),
    )
    op.drop_table("memories")
    op.drop_table("llm_usage")
    op.drop_table("embedding_batches")
    op.execute("DROP EXTENSION IF EXISTS pgcrypto")
    op.execute("DROP EXTENSION IF EXISTS vector")
