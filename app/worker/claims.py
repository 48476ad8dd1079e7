"""The work queue's SQL: claims are leases taken with FOR UPDATE SKIP LOCKED, and every finish or
failure is guarded by the claimant's id, so a worker whose lease expired cannot overwrite the
worker that took the row over.

The data is the queue (ARCHITECTURE.md decision 6): an observation with status `captured` is
pending compression, a session with status `ending` is pending its summary, a sync run with
status `queued` is pending execution. `attempts` counts claims, so a worker killed mid-job spends
one attempt, and its lease (`locked_until`) expires so that another worker takes the row.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app import exactjson


@dataclass(frozen=True, slots=True)
class Queue:
    table: str
    ready: str  # the status that means "to do"
    order: str  # claim order among due rows
    working: str | None = None  # a status the job itself sets while it runs, if any


OBSERVATIONS = Queue("observations", "captured", "seq")
SESSIONS = Queue("sessions", "ending", "ended_at NULLS FIRST, created_at")
# execute_sync_run marks its run `running` itself; a failure puts it back to `queued`.
SYNC_RUNS = Queue("sync_runs", "queued", "created_at", working="running")
QUEUES = (OBSERVATIONS, SESSIONS, SYNC_RUNS)

_DUE = (
    "status = '{ready}' AND attempts < :max_attempts "
    "AND (next_attempt_at IS NULL OR next_attempt_at <= now()) "
    "AND (locked_until IS NULL OR locked_until <= now())"
)

# A session is summarised only once none of its observations is still waiting for compression.
_SESSION_READY = (
    " AND NOT EXISTS (SELECT 1 FROM observations o WHERE o.session_id = t.id "
    "AND o.status = 'captured')"
)


def _claim_sql(queue: Queue, returning: str, extra: str = "") -> Any:
    return text(
        f"WITH picked AS (SELECT t.id FROM {queue.table} t "
        f"WHERE {_DUE.format(ready=queue.ready)}{extra} "
        f"ORDER BY next_attempt_at NULLS FIRST, {queue.order} LIMIT :limit "
        "FOR UPDATE SKIP LOCKED) "
        f"UPDATE {queue.table} AS t SET locked_by = :worker, attempts = t.attempts + 1, "
        "locked_until = now() + make_interval(secs => :lease) "
        f"FROM picked WHERE t.id = picked.id RETURNING {returning}"
    )


_CLAIM_OBSERVATIONS = _claim_sql(
    OBSERVATIONS,
    "t.id, t.session_id, t.project_path, t.function_name, t.function_args, t.result, "
    "t.observation_type, t.attempts, t.original_tokens, t.entities, t.created_at, "
    "t.result_at IS NULL AS result_missing",
)
_CLAIM_SESSIONS = _claim_sql(
    SESSIONS,
    "t.id, t.project_path, t.user_prompt, t.attempts, t.ended_at IS NOT NULL AS ended",
    _SESSION_READY,
)
# A project's runs execute in the order they were requested: a run waits while an older run of its
# project is queued (claimed or in backoff included) or running. Two workers could otherwise run
# A and B at once, and B, taking the project's sync lock first, left the index as A saw it: the
# run requested last lost. A run that failed for good no longer holds the ones behind it back.
_SYNC_IN_ORDER = (
    " AND NOT EXISTS (SELECT 1 FROM sync_runs o WHERE o.project_path = t.project_path "
    "AND o.status IN ('queued', 'running') AND (o.created_at, o.id) < (t.created_at, t.id))"
)
_CLAIM_SYNC_RUNS = _claim_sql(SYNC_RUNS, "t.id, t.project_path, t.attempts", _SYNC_IN_ORDER)


@dataclass(frozen=True, slots=True)
class ObservationWork:
    id: str
    session_id: str
    project_path: str
    function_name: str
    function_args: Any
    result: Any
    observation_type: str
    attempts: int
    # Capture's estimate of the whole call, before any cap: what the agent would re-read.
    original_tokens: int = 0
    # What capture found in it (files, errors, commands, ...: app/capture/entities.py).
    entities: dict[str, list[str]] = field(default_factory=dict)
    # No result was recorded (the call was given up on, or compressed early): `result` is None.
    result_missing: bool = False


@dataclass(frozen=True, slots=True)
class SessionWork:
    id: str
    project_path: str
    user_prompt: str | None
    attempts: int
    # Ended, not a checkpoint (`POST /api/summarize` of a session still at work).
    ended: bool


@dataclass(frozen=True, slots=True)
class SyncRunWork:
    id: uuid.UUID
    project_path: str
    attempts: int


def _params(worker: str, lease: float, limit: int, max_attempts: int) -> dict[str, Any]:
    return {"worker": worker, "lease": lease, "limit": limit, "max_attempts": max_attempts}


async def claim_observations(
    session: AsyncSession, *, worker: str, lease: float, limit: int, max_attempts: int
) -> list[ObservationWork]:
    """Lease up to `limit` due captured observations to `worker`."""
    rows = await session.execute(_CLAIM_OBSERVATIONS, _params(worker, lease, limit, max_attempts))
    return [
        ObservationWork(
            id=r.id,
            session_id=r.session_id,
            project_path=r.project_path,
            function_name=r.function_name,
            # A value no parse reads back as it is (`exactjson.JsonText`) is shown, not walked.
            function_args=exactjson.opaque(r.function_args),
            result=exactjson.opaque(r.result),
            observation_type=r.observation_type,
            attempts=r.attempts,
            original_tokens=r.original_tokens or 0,
            # Names capture found, for the extract's `Mentions:`: unreadable, none (it took
            # them for a dict: AttributeError, the row retried and failed).
            entities=r.entities if isinstance(r.entities, dict) else {},
            result_missing=r.result_missing,
        )
        for r in rows
    ]


async def claim_sessions(
    session: AsyncSession, *, worker: str, lease: float, limit: int, max_attempts: int
) -> list[SessionWork]:
    """Lease up to `limit` ended sessions whose observations are all done."""
    rows = await session.execute(_CLAIM_SESSIONS, _params(worker, lease, limit, max_attempts))
    return [SessionWork(r.id, r.project_path, r.user_prompt, r.attempts, r.ended) for r in rows]


async def claim_sync_runs(
    session: AsyncSession, *, worker: str, lease: float, limit: int, max_attempts: int
) -> list[SyncRunWork]:
    """Lease up to `limit` queued sync runs, none while an older run of its project is pending."""
    rows = await session.execute(_CLAIM_SYNC_RUNS, _params(worker, lease, limit, max_attempts))
    return [SyncRunWork(r.id, r.project_path, r.attempts) for r in rows]


def backoff_seconds(attempts: int, *, base: float, cap: float) -> float:
    """Exponential backoff with full jitter: uniform in [base/2, min(cap, base * 2^(n-1))]."""
    ceiling = min(cap, base * 2 ** max(0, attempts - 1))
    return random.uniform(min(base / 2, ceiling), ceiling)


def _statuses(queue: Queue) -> str:
    return ", ".join(f"'{s}'" for s in (queue.ready, queue.working) if s)


def _fail_sql(queue: Queue) -> Any:
    return text(
        f"UPDATE {queue.table} SET last_error = :error, locked_until = NULL, locked_by = NULL, "
        f"status = CASE WHEN attempts >= :max_attempts THEN 'failed' ELSE '{queue.ready}' END, "
        "next_attempt_at = CASE WHEN attempts >= :max_attempts THEN NULL "
        "ELSE now() + make_interval(secs => :delay) END "
        f"WHERE id = :id AND locked_by = :worker AND status IN ({_statuses(queue)}) "
        "RETURNING status"
    )


_FAIL = {queue.table: _fail_sql(queue) for queue in QUEUES}


async def record_failure(
    session: AsyncSession,
    queue: Queue,
    *,
    row_id: object,
    worker: str,
    error: str,
    delay: float,
    max_attempts: int,
) -> str | None:
    """Release a claim after a failed attempt: retry after `delay`, or `failed` after the last
    attempt (raw data kept). Returns the new status, or None when the claim was lost."""
    result = await session.execute(
        _FAIL[queue.table],
        {
            "id": row_id,
            "worker": worker,
            "error": error[:2000],
            "delay": delay,
            "max_attempts": max_attempts,
        },
    )
    status = result.scalar_one_or_none()
    return str(status) if status is not None else None


def _expire_sql(queue: Queue) -> Any:
    return text(
        f"UPDATE {queue.table} SET status = 'failed', locked_until = NULL, locked_by = NULL, "
        "last_error = coalesce(last_error || '; ', '') || 'claim expired on the last attempt' "
        f"WHERE status = '{queue.ready}' AND attempts >= :max_attempts "
        "AND (locked_until IS NULL OR locked_until <= now())"
    )


_EXPIRE = {queue.table: _expire_sql(queue) for queue in QUEUES}

# A sync run left `running` by a worker that died: its lease ran out, so it is queued again.
_REQUEUE_ABANDONED_SYNC = text(
    "UPDATE sync_runs SET status = 'queued', locked_until = NULL, locked_by = NULL, "
    "last_error = coalesce(last_error || '; ', '') || 'worker lost during the run' "
    "WHERE status = 'running' AND locked_by IS NOT NULL AND locked_until <= now()"
)


async def fail_exhausted(session: AsyncSession, *, max_attempts: int) -> int:
    """Queue again sync runs whose worker died mid-run, then mark `failed` the rows whose last
    attempt's claim expired."""
    await session.execute(_REQUEUE_ABANDONED_SYNC)
    total = 0
    for queue in QUEUES:
        result: Any = await session.execute(_EXPIRE[queue.table], {"max_attempts": max_attempts})
        total += int(result.rowcount or 0)
    return total


_RENEW = {
    queue.table: text(
        f"UPDATE {queue.table} SET locked_until = now() + make_interval(secs => :lease) "
        "WHERE id = :id AND locked_by = :worker"
    )
    for queue in QUEUES
}


async def renew_lease(
    session: AsyncSession, queue: Queue, *, row_id: object, worker: str, lease: float
) -> bool:
    """Extend a claim that is still being worked on; False when it is no longer ours."""
    result: Any = await session.execute(
        _RENEW[queue.table], {"id": row_id, "worker": worker, "lease": lease}
    )
    return bool(result.rowcount)


_RETRY_OBSERVATIONS = text(
    "UPDATE observations SET status = 'captured', attempts = 0, next_attempt_at = NULL, "
    "locked_until = NULL, locked_by = NULL "
    "WHERE status = 'failed' AND (CAST(:project AS text) IS NULL OR project_path = :project) "
    "RETURNING session_id"
)
_RETRY_SESSIONS = text(
    "UPDATE sessions SET status = 'ending', attempts = 0, next_attempt_at = NULL, "
    "locked_until = NULL, locked_by = NULL "
    "WHERE status = 'failed' AND (CAST(:project AS text) IS NULL OR project_path = :project)"
)
# A summary written while one of its observations had failed says so ("1 observation could not
# be compressed") and lacks it: once the observation is compressed, the session is summarised
# again.
_RESUMMARIZE_SESSIONS = text(
    "UPDATE sessions SET status = 'ending', attempts = 0, next_attempt_at = NULL, "
    "locked_until = NULL, locked_by = NULL "
    "WHERE status = 'summarized' AND id = ANY(CAST(:ids AS text[]))"
)


async def summarize_again(session: AsyncSession, *, session_ids: list[str]) -> int:
    """Queue these sessions' summaries again if they were already written; how many were."""
    again: Any = await session.execute(_RESUMMARIZE_SESSIONS, {"ids": sorted(set(session_ids))})
    return int(again.rowcount or 0)


async def retry_failed(session: AsyncSession, *, project_path: str | None) -> tuple[int, int, int]:
    """Put failed observations and sessions back in the queue, and the summarised sessions of
    those observations; (observations, sessions, sessions to summarise again)."""
    params = {"project": project_path}
    observations = (await session.execute(_RETRY_OBSERVATIONS, params)).scalars().all()
    sessions: Any = await session.execute(_RETRY_SESSIONS, params)
    again = await summarize_again(session, session_ids=list(observations))
    return len(observations), int(sessions.rowcount or 0), again


# A session waiting for its observations' compression is due with them, not before: due since
# its end, it woke every idle lane every 50 ms while they waited (a 429's hour-long pause, a
# backoff). The compression that makes it ready wakes them: its index row notifies.
_NEXT_DUE = text(
    "SELECT min(due) FROM ("
    "SELECT min(greatest(next_attempt_at, locked_until)) AS due FROM observations "
    "WHERE status = 'captured' UNION ALL "
    "SELECT min(greatest(next_attempt_at, locked_until)) FROM sessions t "
    f"WHERE status = 'ending'{_SESSION_READY} "
    "UNION ALL SELECT min(greatest(next_attempt_at, locked_until)) FROM sync_runs "
    "WHERE status = 'queued') AS queues"
)


async def seconds_until_next_due(session: AsyncSession) -> float | None:
    """Seconds until the earliest retry or lease expiry comes due (None: nothing scheduled)."""
    due = (await session.execute(_NEXT_DUE)).scalar_one_or_none()
    if due is None:
        return None
    now = (await session.execute(text("SELECT now()"))).scalar_one()
    return max(0.0, float((due - now).total_seconds()))
