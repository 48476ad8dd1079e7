"""Which session a proxied call belongs to: the caller's, or the project's open proxy session.

Without `X-Agmem-Session`, the proxy keeps one session per project open while calls keep coming,
and ends it once it has been idle for `AGMEM_PROXY_SESSION_IDLE_SECONDS`. Only sessions the proxy
opened itself are reused or ended this way; a session an IDE hook started is left to that hook.
Both the reuse and the idle sweep lock the row, so a session is never reused while being ended.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

PROXY_CREATOR = "gemini-proxy"

# Serialises the choose-or-open step per project across every API process sharing the database.
_LOCK_PROJECT = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")

_REUSABLE = text(
    """
    SELECT id FROM sessions
    WHERE project_path = :project AND created_by = :creator AND status = 'active'
      AND last_activity_at > now() - make_interval(secs => :idle)
    ORDER BY last_activity_at DESC
    LIMIT 1
    FOR UPDATE
    """
)

_TOUCH = text("UPDATE sessions SET last_activity_at = now() WHERE id = :id AND status = 'active'")

_IDLE = text(
    """
    SELECT id FROM sessions
    WHERE created_by = :creator AND status = 'active'
      AND last_activity_at <= now() - make_interval(secs => :idle)
      AND (CAST(:project AS text) IS NULL OR project_path = :project)
    ORDER BY last_activity_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)


# The project's latest proxy sessions, newest first: where a conversation's earlier calls are.
_RECENT = text(
    """
    SELECT id FROM sessions
    WHERE project_path = :project AND created_by = :creator
    ORDER BY created_at DESC
    LIMIT :limit
    """
)

_HOLDERS = text("SELECT DISTINCT session_id FROM observations WHERE id = ANY(:ids)")


async def lock_project(session: AsyncSession, *, project: str) -> None:
    """Hold the project's session-choice lock until this transaction ends."""
    await session.execute(_LOCK_PROJECT, {"key": f"agmem-proxy-session:{project}"})


async def reusable_session(session: AsyncSession, *, project: str, idle_s: int) -> str | None:
    """The project's proxy session still within its idle window, if any."""
    found = await session.execute(
        _REUSABLE, {"project": project, "creator": PROXY_CREATOR, "idle": idle_s}
    )
    return found.scalar_one_or_none()


async def touch_session(session: AsyncSession, *, session_id: str) -> None:
    """Mark the session as used now, which restarts its idle window."""
    await session.execute(_TOUCH, {"id": session_id})


async def idle_sessions(
    session: AsyncSession, *, idle_s: int, project: str | None = None, limit: int = 100
) -> list[str]:
    """Proxy-opened sessions idle past the window, oldest first."""
    found = await session.execute(
        _IDLE, {"creator": PROXY_CREATOR, "idle": idle_s, "project": project, "limit": limit}
    )
    return list(found.scalars())


async def recent_sessions(session: AsyncSession, *, project: str, limit: int) -> list[str]:
    """The project's `limit` latest proxy-opened sessions, newest first, whatever their status."""
    found = await session.execute(
        _RECENT, {"project": project, "creator": PROXY_CREATOR, "limit": limit}
    )
    return list(found.scalars())


async def holders_of(session: AsyncSession, *, observation_ids: list[str]) -> set[str]:
    """The sessions of those of `observation_ids` that are recorded."""
    found = await session.execute(_HOLDERS, {"ids": observation_ids})
    return set(found.scalars())
