"""What a finished job writes: compressed observations, session summaries, their index rows,
the observations a summary reads, and the TTL purge of key/value memories."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.index.writer import replace_index_text
from app.llm.compress import Compressed
from app.llm.fallback import ObservationDigest, target_files

# An observation compressed after its session was summarised (a result that came after the end:
# an interceptor ends its session as the task ends, and the last command's result may come after
# the worker's summary) puts the session back to `ending`, so that its summary is written again
# with it; in the same statement, not a second round trip per observation. A session claimed for
# its summary (a call still waiting for its result does not hold the claim back) loses that
# claim: the summary in flight misses the observation, and its finish is then refused.
_FINISH_OBSERVATION = text(
    "WITH done AS (UPDATE observations SET status = 'compressed', compressed_data = :text, "
    "generated_by = :generated_by, original_tokens = :original, compressed_tokens = :compressed, "
    "tokens_saved = :saved, compressed_at = now(), last_error = :error, next_attempt_at = NULL, "
    "locked_until = NULL, locked_by = NULL "
    "WHERE id = :id AND locked_by = :worker AND status = 'captured' "
    "RETURNING session_id, project_path, observed_at), "
    "again AS (UPDATE sessions AS s SET status = 'ending', attempts = 0, next_attempt_at = NULL, "
    "locked_until = NULL, locked_by = NULL FROM done "
    "WHERE s.id = done.session_id "
    "AND (s.status = 'summarized' OR (s.status = 'ending' AND s.locked_by IS NOT NULL))) "
    "SELECT session_id, project_path, observed_at FROM done"
)


async def finish_observation(
    session: AsyncSession,
    *,
    observation_id: str,
    worker: str,
    result: Compressed,
    error: str | None = None,
) -> bool:
    """Store the compression and index it; False when this worker's claim was lost meanwhile.
    `error` is why a fallback wrote it (kept as `last_error`), else None."""
    row = (
        await session.execute(
            _FINISH_OBSERVATION,
            {
                "id": observation_id,
                "worker": worker,
                "text": result.text,
                "generated_by": result.generated_by,
                "original": result.original_tokens,
                "compressed": result.compressed_tokens,
                "saved": result.tokens_saved,
                "error": error,
            },
        )
    ).one_or_none()
    if row is None:
        return False
    await replace_index_text(
        session,
        project_path=row.project_path,
        source="observation",
        texts=[result.text],
        observation_id=observation_id,
        session_id=row.session_id,
        # Search's time filters and `createdAt` are when the call happened, not when the worker
        # got to it: an observation sent late (a queue, an offline client) is still of its hour.
        created_at=row.observed_at,
    )
    return True


# A write retried after the database's loss: whether its first try committed (the reply was
# what got lost), its result already on the row.
_HOLDS_COMPRESSION = text(
    "SELECT 1 FROM observations WHERE id = :id AND status = 'compressed' "
    "AND compressed_data = :text AND generated_by = :generated_by"
)
_HOLDS_SUMMARY = text(
    "SELECT 1 FROM sessions WHERE id = :id AND status = 'summarized' "
    "AND summary = :summary AND summary_generated_by = :generated_by"
)


async def holds_compression(
    session: AsyncSession, *, observation_id: str, result: Compressed
) -> bool:
    """Whether the observation is stored with exactly this compression."""
    found = await session.execute(
        _HOLDS_COMPRESSION,
        {"id": observation_id, "text": result.text, "generated_by": result.generated_by},
    )
    return found.first() is not None


async def holds_summary(session: AsyncSession, *, session_id: str, summary: SessionSummary) -> bool:
    """Whether the session is stored with exactly this summary."""
    found = await session.execute(
        _HOLDS_SUMMARY,
        {"id": session_id, "summary": summary.text, "generated_by": summary.generated_by},
    )
    return found.first() is not None


_SESSION_OBSERVATIONS = text(
    "SELECT function_name, observation_type, status, compressed_data, function_args, "
    "(result_at IS NULL AND status <> 'pending') AS result_missing "
    "FROM observations WHERE session_id = :id ORDER BY seq"
)


async def session_digests(session: AsyncSession, *, session_id: str) -> list[ObservationDigest]:
    """The session's observations in order, as a summary reads them."""
    rows = await session.execute(_SESSION_OBSERVATIONS, {"id": session_id})
    return [
        ObservationDigest(
            function_name=r.function_name,
            observation_type=r.observation_type,
            status=r.status,
            compressed=r.compressed_data,
            files=target_files(r.function_args),
            result_missing=r.result_missing,
        )
        for r in rows
    ]


_FINISH_SESSION = text(
    "UPDATE sessions AS s SET status = 'summarized', summary = :summary, "
    "summary_generated_by = :generated_by, "
    "total_observations = (SELECT count(*) FROM observations o WHERE o.session_id = s.id), "
    "tokens_saved = (SELECT coalesce(sum(o.tokens_saved), 0) FROM observations o "
    "WHERE o.session_id = s.id), "
    "summarized_at = now(), last_error = :error, "
    "next_attempt_at = NULL, locked_until = NULL, locked_by = NULL "
    "WHERE s.id = :id AND s.locked_by = :worker AND s.status = 'ending' "
    "AND (s.ended_at IS NOT NULL) = :ended "
    "RETURNING s.project_path, coalesce(s.ended_at, s.last_activity_at) AS ended_at"
)


@dataclass(frozen=True, slots=True)
class SessionSummary:
    text: str
    generated_by: str


async def finish_session(
    session: AsyncSession,
    *,
    session_id: str,
    worker: str,
    summary: SessionSummary,
    ended: bool,
    error: str | None = None,
) -> bool:
    """Store the summary with the session's totals and index it; False when the claim was lost.

    `ended`: whether the session had ended when it was claimed. A checkpoint's summary whose
    session was ended meanwhile is refused even when the end's claim went to another lane of
    this worker (the lanes share its id, so `locked_by` alone let the checkpoint's stale write
    win and the end's be refused, for good)."""
    row = (
        await session.execute(
            _FINISH_SESSION,
            {
                "id": session_id,
                "worker": worker,
                "summary": summary.text,
                "generated_by": summary.generated_by,
                "error": error,
                "ended": ended,
            },
        )
    ).one_or_none()
    if row is None:
        return False
    ended_at: datetime = row.ended_at
    await replace_index_text(
        session,
        project_path=row.project_path,
        source="summary",
        texts=[summary.text],
        session_id=session_id,
        created_at=ended_at,
    )
    return True


_RELEASE = {
    table: text(
        f"UPDATE {table} SET locked_until = NULL, locked_by = NULL, "
        "attempts = greatest(attempts - 1, 0), next_attempt_at = CASE WHEN :delay > 0 "
        "THEN now() + make_interval(secs => :delay) ELSE next_attempt_at END"
        # A sync run the job had marked `running` goes back to the queue.
        + (
            ", status = CASE WHEN status = 'running' THEN 'queued' ELSE status END"
            if table == "sync_runs"
            else ""
        )
        + " WHERE id = :id AND locked_by = :worker"
    )
    for table in ("observations", "sessions", "sync_runs")
}


async def release_claim(
    session: AsyncSession, *, table: str, row_id: object, worker: str, delay: float = 0.0
) -> None:
    """Give a claim back untouched (the worker is stopping, or Gemini asked us to wait), due
    again after `delay` seconds; the attempt does not count."""
    await session.execute(_RELEASE[table], {"id": row_id, "worker": worker, "delay": delay})


_RELEASE_SYNC_RUN = text(
    "UPDATE sync_runs SET locked_until = NULL, locked_by = NULL "
    "WHERE id = :id AND locked_by = :worker"
)


async def finish_sync_claim(session: AsyncSession, *, run_id: object, worker: str) -> None:
    """Drop the claim of a sync run that recorded its own outcome (done or failed)."""
    await session.execute(_RELEASE_SYNC_RUN, {"id": run_id, "worker": worker})


_HAS_UNEMBEDDED = text(
    "SELECT EXISTS (SELECT 1 FROM memory_chunks WHERE embedding IS NULL AND embed_attempts < :max)"
)


async def has_unembedded_chunks(session: AsyncSession, *, max_attempts: int) -> bool:
    """Whether any index row still waits for a vector (a cheap probe of a partial index)."""
    return bool((await session.execute(_HAS_UNEMBEDDED, {"max": max_attempts})).scalar_one())


# Vectors of text no index row holds any more, under any model: a growing transcript's old last
# chunk (one a sync), an edited file's old text. Text still indexed keeps its vector under every
# model, so switching back to a model stays free. The grace leaves alone what a sync may be
# about to write rows for.
_PRUNE_CACHE = text(
    "DELETE FROM memory_embedding_cache AS c "
    "WHERE c.created_at < now() - make_interval(secs => :grace) "
    "AND NOT EXISTS (SELECT 1 FROM memory_chunks AS m WHERE m.hash = c.hash)"
)


async def prune_embedding_cache(session: AsyncSession, *, grace_seconds: float) -> int:
    """Drop cached vectors of text no index row holds, older than `grace_seconds`."""
    result: Any = await session.execute(_PRUNE_CACHE, {"grace": grace_seconds})
    return int(result.rowcount or 0)


_PURGE_MEMORIES = text("DELETE FROM memories WHERE expires_at IS NOT NULL AND expires_at <= now()")


async def purge_expired_memories(session: AsyncSession) -> int:
    """Delete key/value memories past their TTL (their index rows and versions cascade)."""
    result: Any = await session.execute(_PURGE_MEMORIES)
    return int(result.rowcount or 0)
