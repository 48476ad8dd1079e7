"""ORM models. Alembic owns the schema; these describe it for queries and for `alembic check`.

Every table carries `project_path` (the absolute project path as the client sends it) so that a
query never crosses projects by accident and the schema can later be sharded by project. The
exceptions are `memory_embedding_cache`, which is content-addressed (see docs/architecture.md),
and `redaction_state`, one row about every project's stored text.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Code-aware full text: the english parser keeps `validateToken` and `auth/jwt.ts` whole, so the
# generated column also indexes `search_terms`, the parts of the identifier-like tokens, split by
# every writer in Python (app.index.terms): splitting the whole text again in SQL with two
# regexp_replace calls and a second to_tsvector over it doubled a row's indexing cost.
TSVECTOR_EXPRESSION = (
    "to_tsvector('english'::regconfig, content) || "
    "to_tsvector('english'::regconfig, COALESCE(search_terms, ''::text))"
)


def _utcnow() -> Any:
    return func.now()


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class WorkQueueMixin:
    """Columns that make a row a durable unit of work, claimed with FOR UPDATE SKIP LOCKED."""

    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    # A claim is a lease: a worker that dies leaves `locked_until` in the past, and the row is
    # claimable again, so nothing stays claimed forever.
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    locked_by: Mapped[str | None] = mapped_column(String(200))


class SessionRow(WorkQueueMixin, Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    project_path: Mapped[str] = mapped_column(Text, nullable=False)
    user_prompt: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(200))
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSONB)
    # active -> ending -> summarized (or failed, keeping every observation)
    status: Mapped[str] = mapped_column(String(20), nullable=False, server_default="active")
    summary: Mapped[str | None] = mapped_column(Text)
    summary_generated_by: Mapped[str | None] = mapped_column(String(100))
    total_observations: Mapped[int] = mapped_column(Integer, server_default="0")
    tokens_saved: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    last_activity_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    summarized_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("ix_sessions_project_path_created_at", "project_path", "created_at"),
        Index(
            "ix_sessions_pending_summary",
            "next_attempt_at",
            postgresql_where=text("status = 'ending'"),
        ),
    )


class ObservationRow(WorkQueueMixin, Base):
    __tablename__ = "observations"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        String(200), ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
    )
    project_path: Mapped[str] = mapped_column(Text, nullable=False)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(always=False), nullable=False)
    function_name: Mapped[str] = mapped_column(String(300), nullable=False)
    # function_args and result have STORAGE EXTERNAL (out of line, not compressed): set in the
    # 0001 migration, since SQLAlchemy has no column option for it. See the comment there.
    function_args: Mapped[Any] = mapped_column(JSONB, nullable=False, server_default="{}")
    result: Mapped[Any | None] = mapped_column(JSONB)
    observation_type: Mapped[str] = mapped_column(String(30), nullable=False)
    entities: Mapped[dict[str, list[str]]] = mapped_column(
        JSONB, nullable=False, server_default="{}"
    )
    # pending (call seen) -> captured (result seen) -> compressed | failed (raw data kept)
    status: Mapped[str] = mapped_column(String(20), nullable=False, server_default="pending")
    compressed_data: Mapped[str | None] = mapped_column(Text)
    generated_by: Mapped[str | None] = mapped_column(String(100))
    original_tokens: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    compressed_tokens: Mapped[int | None] = mapped_column(Integer)
    tokens_saved: Mapped[int | None] = mapped_column(Integer)
    args_bytes: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    result_bytes: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    truncated: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    observed_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    result_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    compressed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("ix_observations_session_id_seq", "session_id", "seq"),
        Index("ix_observations_project_path_created_at", "project_path", "created_at"),
        Index(
            "ix_observations_pending_match",
            "session_id",
            "function_name",
            "seq",
            postgresql_where=text("status = 'pending'"),
        ),
        Index(
            "ix_observations_to_compress",
            "next_attempt_at",
            postgresql_where=text("status = 'captured'"),
        ),
    )


class MemoryFileRow(Base):
    __tablename__ = "memory_files"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False), primary_key=True)
    project_path: Mapped[str] = mapped_column(Text, nullable=False)
    path: Mapped[str] = mapped_column(Text, nullable=False)
    source: Mapped[str] = mapped_column(String(20), nullable=False)  # memory | sessions
    hash: Mapped[str] = mapped_column(String(64), nullable=False)
    mtime: Mapped[float] = mapped_column(Float, nullable=False)
    size: Mapped[int] = mapped_column(BigInteger, nullable=False)
    chunk_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    indexed_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    # app.privacy.RULES_VERSION when the chunks were made; a sync re-chunks on any other value.
    rules: Mapped[str | None] = mapped_column(String(16))
    # The memory root or sessions folder (as `source` says) the file was found under: a sync
    # deletes the missing files of its own roots only. NULL: indexed before it was recorded.
    root: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (UniqueConstraint("project_path", "path"),)


class MemoryChunkRow(Base):
    """The one search index: file and transcript chunks, observations, summaries, kv memories."""

    __tablename__ = "memory_chunks"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False), primary_key=True)
    project_path: Mapped[str] = mapped_column(Text, nullable=False)
    # memory | sessions | observation | summary | kv
    source: Mapped[str] = mapped_column(String(20), nullable=False)
    file_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("memory_files.id", ondelete="CASCADE")
    )
    file_path: Mapped[str | None] = mapped_column(Text)
    start_line: Mapped[int | None] = mapped_column(Integer)
    end_line: Mapped[int | None] = mapped_column(Integer)
    session_id: Mapped[str | None] = mapped_column(
        String(200), ForeignKey("sessions.id", ondelete="CASCADE")
    )
    observation_id: Mapped[str | None] = mapped_column(
        String(200), ForeignKey("observations.id", ondelete="CASCADE")
    )
    memory_id: Mapped[uuid.UUID | None] = mapped_column(
        UUID(as_uuid=True), ForeignKey("memories.id", ondelete="CASCADE")
    )
    content: Mapped[str] = mapped_column(Text, nullable=False)
    hash: Mapped[str] = mapped_column(String(64), nullable=False)  # sha256 of content
    # Parts of the content's identifier-like tokens (app.index.terms.search_terms), for `tsv`.
    search_terms: Mapped[str | None] = mapped_column(Text)
    # Untyped vector: each model's vectors get a partial expression HNSW index of their own width.
    embedding: Mapped[list[float] | None] = mapped_column(Vector())
    model: Mapped[str | None] = mapped_column(String(200))  # provider:model:dims
    embed_attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    embed_error: Mapped[str | None] = mapped_column(Text)
    # A worker embedding the row until then (a lease, not a lock held across the provider call).
    embed_claimed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    tsv: Mapped[Any] = mapped_column(TSVECTOR, Computed(TSVECTOR_EXPRESSION, persisted=True))
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )

    __table_args__ = (
        Index("ix_memory_chunks_tsv", "tsv", postgresql_using="gin"),
        Index("ix_memory_chunks_project_path_source", "project_path", "source"),
        # A row belongs to a file, an observation (and its session), a summary's session or a
        # memory: the other owner columns are NULL and stay out of their indexes (lookups and
        # cascades are `col = value` or `= ANY`, which imply `col IS NOT NULL`).
        *(
            Index(f"ix_memory_chunks_{owner}", owner, postgresql_where=text(f"{owner} IS NOT NULL"))
            for owner in ("file_id", "session_id", "observation_id", "memory_id")
        ),
        Index(
            "ix_memory_chunks_unembedded",
            "id",
            postgresql_where=text("embedding IS NULL"),
        ),
        # Rows stay inline up to a page: a chunk (~2.9 KB of text, vector and tsv) went over the
        # default 2 KB and had its values compressed and moved out of line, ~18 us of server CPU
        # a row (docs/benchmarks.md, Sync, "Branch vector5").
        {"postgresql_with": {"toast_tuple_target": 8160}},
    )


class EmbeddingCacheRow(Base):
    __tablename__ = "memory_embedding_cache"

    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    embedding: Mapped[list[float]] = mapped_column(Vector(), nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )


class MemoryRow(Base):
    """Key/value memories. Empty strings, not NULLs, stand for "no project/session" so that the
    uniqueness of (scope, project, session, key) holds on every Postgres version."""

    __tablename__ = "memories"

    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    scope: Mapped[str] = mapped_column(String(20), nullable=False)
    project_path: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    session_id: Mapped[str] = mapped_column(String(200), nullable=False, server_default="")
    key: Mapped[str] = mapped_column(Text, nullable=False)
    value: Mapped[Any] = mapped_column(JSONB, nullable=False)
    created_by: Mapped[str | None] = mapped_column(String(200))
    updated_by: Mapped[str | None] = mapped_column(String(200))
    tags: Mapped[list[str]] = mapped_column(
        ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")
    )
    ttl: Mapped[int | None] = mapped_column(Integer)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    version: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    accessed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    access_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")

    __table_args__ = (
        UniqueConstraint("scope", "project_path", "session_id", "key"),
        Index("ix_memories_project_path_key", "project_path", "key"),
        Index("ix_memories_tags", "tags", postgresql_using="gin"),
        Index(
            "ix_memories_expires_at",
            "expires_at",
            postgresql_where=text("expires_at IS NOT NULL"),
        ),
    )


class MemoryVersionRow(Base):
    """Every value a memory held before it was overwritten, and who wrote it."""

    __tablename__ = "memory_versions"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False), primary_key=True)
    memory_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("memories.id", ondelete="CASCADE"), nullable=False
    )
    project_path: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    value: Mapped[Any] = mapped_column(JSONB, nullable=False)
    written_by: Mapped[str | None] = mapped_column(String(200))
    written_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)

    __table_args__ = (Index("ix_memory_versions_memory_id_version", "memory_id", "version"),)


class SyncRunRow(WorkQueueMixin, Base):
    """A requested sync of one project's memory and transcript folders; also the worker's unit."""

    __tablename__ = "sync_runs"

    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    project_path: Mapped[str] = mapped_column(Text, nullable=False)  # the key (app/projects.py)
    # The folder as the client spelled it, read by the run, when that is not the key itself.
    folder: Mapped[str | None] = mapped_column(Text)
    memory_dir: Mapped[str | None] = mapped_column(Text)
    sessions_dir: Mapped[str | None] = mapped_column(Text)
    # Roots whose indexed files the run drops (`forgetDirs`), as the client gave them.
    forget_dirs: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    force: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    reembed: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default="false")
    # queued -> running -> done | failed
    status: Mapped[str] = mapped_column(String(20), nullable=False, server_default="queued")
    stats: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default="{}")
    errors: Mapped[list[Any]] = mapped_column(JSONB, nullable=False, server_default="[]")
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("ix_sync_runs_project_path_created_at", "project_path", "created_at"),
        Index(
            "ix_sync_runs_queued",
            "next_attempt_at",
            postgresql_where=text("status = 'queued'"),
        ),
    )


class EmbeddingBatchRow(Base):
    """A Gemini Batch API embedding job, recorded so that it resumes after a restart."""

    __tablename__ = "embedding_batches"

    id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")
    )
    project_path: Mapped[str] = mapped_column(Text, nullable=False)
    model: Mapped[str] = mapped_column(String(200), nullable=False)
    provider_job: Mapped[str | None] = mapped_column(Text)  # the remote batch name
    hashes: Mapped[list[str]] = mapped_column(JSONB, nullable=False)
    # submitted -> done | failed
    status: Mapped[str] = mapped_column(String(20), nullable=False, server_default="submitted")
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), nullable=False, server_default=_utcnow()
    )
    # The cancel at Gemini of a job we stopped waiting for (migration 0007): NULL (nothing to
    # cancel) | pending -> cancelled | ended (it had ended there) | expired (past its 48 hours)
    cancel_status: Mapped[str | None] = mapped_column(String(20))
    cancel_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_settled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index(
            "ix_embedding_batches_cancel_pending",
            "project_path",
            postgresql_where=text("cancel_status = 'pending'"),
        ),
    )


class LlmUsageRow(Base):
    """Gemini calls and tokens per day, model and project: the durable daily budget."""

    __tablename__ = "llm_usage"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    project_path: Mapped[str] = mapped_column(Text, primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    requests: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    input_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    output_tokens: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")


class RedactionStateRow(Base):
    """The privacy rules' version (`app.privacy.RULES_VERSION`) every stored row was last
    redacted under: one row, id 1. A worker that finds another version claims the row and runs
    the redaction pass (app/worker/rescan.py); NULL (an upgraded database) means never."""

    __tablename__ = "redaction_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    rules: Mapped[str | None] = mapped_column(String(16))
    # `app.privacy.RULES_GENERATION` of those rules: only a build with a greater one rescans.
    generation: Mapped[int | None] = mapped_column(Integer)
    redacted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Unused since the claim became an advisory lock (fixredact17); kept for builds of redact17
    # still running against this database during an upgrade, which read and write it.
    claimed_by: Mapped[str | None] = mapped_column(String(200))
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
