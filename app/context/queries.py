"""The context builder's SQL: recent session summaries and the project's kv facts, in one query."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

_SESSIONS_AND_FACTS = text(
    """
(SELECT 'session' AS kind, s.id AS ref, s.user_prompt AS title, s.summary AS body,
        COALESCE(s.ended_at, s.last_activity_at, s.created_at) AS at
 FROM sessions s
 WHERE s.project_path = :project AND s.summary IS NOT NULL AND btrim(s.summary) <> ''
 ORDER BY s.created_at DESC, s.id
 LIMIT :sessions)
UNION ALL
(SELECT 'kv', m.id::text, m.key, m.value::text, m.updated_at
 FROM memories m
 WHERE m.scope = 'project' AND m.project_path = :project
   AND (m.key LIKE 'project.%' OR m.key LIKE 'current.%')
   AND (m.expires_at IS NULL OR m.expires_at > now())
 ORDER BY m.key
 LIMIT :facts)
"""
)


async def sessions_and_facts(
    session: AsyncSession, *, project_path: str, sessions: int, facts: int
) -> list[Any]:
    """Latest summarised sessions (most recent first) then live `project.*`/`current.*` memories."""
    result = await session.execute(
        _SESSIONS_AND_FACTS, {"project": project_path, "sessions": sessions, "facts": facts}
    )
    return list(result.all())
