"""What a running app holds: settings, the database engine and its sessionmaker, and the
memories' read path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings

if TYPE_CHECKING:
    from app.llm.ratelimit import GeminiGate
    from app.memories.reads import MemoryReads


@dataclass(slots=True)
class AppState:
    settings: Settings
    database_url: str
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    # The exact-key read path of memories, while the app's lifespan runs (None in the CLI).
    memory_reads: MemoryReads | None = None
    # The breaker of the API's own Gemini calls (resume briefings), while the lifespan runs.
    gemini_gate: GeminiGate | None = None
