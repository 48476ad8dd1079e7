"""Small typed builders that write index rows straight into the test database and embed them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.engine import make_async_engine, make_sessionmaker
from app.index.embedding import embed_pending_chunks
from app.index.terms import search_terms
from app.index.writer import content_hash
from app.llm.embeddings import local_embedder

T = TypeVar("T")


@dataclass(slots=True)
class Chunk:
    content: str
    project: str = "/p"
    source: str = "memory"
    path: str | None = "notes.md"
    start_line: int | None = 1
    end_line: int | None = 5
    session_id: str | None = None
    observation_id: str | None = None
    created_at: datetime | None = None


def in_session(database_url: str, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """Run `work` in one committed transaction on a fresh engine."""

    async def go() -> T:
        engine = make_async_engine(database_url)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                return await work(session)
        finally:
            await engine.dispose()

    return asyncio.run(go())


_INSERT = text(
    "INSERT INTO memory_chunks (project_path, source, file_path, start_line, end_line, "
    "session_id, observation_id, content, search_terms, hash, created_at) VALUES (:project, "
    ":source, :path, :start_line, :end_line, :session_id, :observation_id, :content, :terms, "
    ":hash, "
    "COALESCE(CAST(:created_at AS timestamptz), now())) RETURNING id"
)


def add_chunks(database_url: str, chunks: list[Chunk], *, embed: bool = True) -> list[int]:
    """Insert the chunks (file chunks unless told otherwise), embed them, return their ids."""

    async def work(session: AsyncSession) -> list[int]:
        ids = []
        for chunk in chunks:
            params: dict[str, Any] = {
                "project": chunk.project,
                "source": chunk.source,
                "path": chunk.path,
                "start_line": chunk.start_line,
                "end_line": chunk.end_line,
                "session_id": chunk.session_id,
                "observation_id": chunk.observation_id,
                "content": chunk.content,
                "terms": search_terms(chunk.content),
                "hash": content_hash(chunk.content),
                "created_at": chunk.created_at,
            }
            ids.append((await session.execute(_INSERT, params)).scalar_one())
        if embed:
            while (await embed_pending_chunks(session, local_embedder())).chunks:
                pass
        return ids

    return in_session(database_url, work)


def add_session(
    database_url: str,
    session_id: str,
    *,
    project: str = "/p",
    summary: str | None = None,
    prompt: str | None = None,
    created_at: datetime | None = None,
) -> None:
    async def work(session: AsyncSession) -> None:
        await session.execute(
            text(
                "INSERT INTO sessions (id, project_path, user_prompt, summary, status, created_at, "
                "last_activity_at, ended_at) VALUES (:id, :project, :prompt, :summary, "
                "'summarized', COALESCE(CAST(:at AS timestamptz), now()), "
                "COALESCE(CAST(:at AS timestamptz), now()), "
                "COALESCE(CAST(:at AS timestamptz), now()))"
            ),
            {
                "id": session_id,
                "project": project,
                "prompt": prompt,
                "summary": summary,
                "at": created_at,
            },
        )

    in_session(database_url, work)


def add_memory(
    database_url: str,
    key: str,
    value: Any,
    *,
    project: str = "/p",
    scope: str = "project",
    expired: bool = False,
) -> None:
    import json

    async def work(session: AsyncSession) -> None:
        await session.execute(
            text(
                "INSERT INTO memories (scope, project_path, key, value, expires_at) VALUES "
                "(:scope, :project, :key, CAST(:value AS jsonb), "
                "CASE WHEN :expired THEN now() - interval '1 hour' END)"
            ),
            {
                "scope": scope,
                "project": project,
                "key": key,
                "value": json.dumps(value),
                "expired": expired,
            },
        )

    in_session(database_url, work)


# Copies of one text that fill a context block's first page of hits, and the distinct notes
# ranked below them (tests of the builder's second, longer page).
COPIED_TEXT = "The capybara deploy runbook: run make release with the capybara profile set."
NOTE_WORDS = ["lint", "migrate", "backup", "smoke", "notify"]
COPIES_PROMPT = "capybara deploy runbook release profile"


def add_copies_and_notes(database_url: str) -> None:
    """40 copies of one memory file (`copyN/MEMORY.md`) and 5 distinct notes (`noteN.md`)."""
    add_chunks(database_url, [Chunk(COPIED_TEXT, path=f"copy{n}/MEMORY.md") for n in range(40)])
    notes = [
        f"Capybara deploy note {n}: the {word} step needs its own check."
        for n, word in enumerate(NOTE_WORDS)
    ]
    add_chunks(database_url, [Chunk(note, path=f"note{n}.md") for n, note in enumerate(notes)])
