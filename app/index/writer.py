"""Writes and removes rows of the one search index (`memory_chunks`) for text that is not a file.

Observations, session summaries and key/value memories each own their index rows through a
foreign key with ON DELETE CASCADE, so deleting the text deletes its rows. Rows are written with
no embedding; the worker embeds them (cache first), never a request.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Literal

from sqlalchemy import ColumnElement, delete, insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import MemoryChunkRow
from app.index.terms import search_terms

TextSource = Literal["observation", "summary", "kv"]


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


async def replace_index_text(
    session: AsyncSession,
    *,
    project_path: str,
    source: TextSource,
    texts: list[str],
    session_id: str | None = None,
    observation_id: str | None = None,
    memory_id: uuid.UUID | None = None,
    created_at: datetime | None = None,
) -> int:
    """Make `texts` the index rows of one owner (an observation, a session's summary, a memory).

    The owner is the single reference given for the source: `observation_id` for observations,
    `session_id` for summaries, `memory_id` for kv. Existing rows of that owner are replaced.
    """
    owner = _owner_filter(source, session_id, observation_id, memory_id)
    await session.execute(delete(MemoryChunkRow).where(*owner))
    rows = [
        {
            "project_path": project_path,
            "source": source,
            "session_id": session_id,
            "observation_id": observation_id,
            "memory_id": memory_id,
            "content": text,
            "search_terms": search_terms(text),
            "hash": content_hash(text),
            **({"created_at": created_at} if created_at is not None else {}),
        }
        for text in texts
        if text.strip()
    ]
    if rows:
        await session.execute(insert(MemoryChunkRow), rows)
    return len(rows)


def _owner_filter(
    source: TextSource,
    session_id: str | None,
    observation_id: str | None,
    memory_id: uuid.UUID | None,
) -> list[ColumnElement[bool]]:
    if source == "observation":
        if observation_id is None:
            raise ValueError("observation index rows need observation_id")
        return [
            MemoryChunkRow.source == "observation",
            MemoryChunkRow.observation_id == observation_id,
        ]
    if source == "summary":
        if session_id is None:
            raise ValueError("summary index rows need session_id")
        return [MemoryChunkRow.source == "summary", MemoryChunkRow.session_id == session_id]
    if memory_id is None:
        raise ValueError("kv index rows need memory_id")
    return [MemoryChunkRow.source == "kv", MemoryChunkRow.memory_id == memory_id]
