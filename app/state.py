"""What a running app holds: settings, the database engine and its sessionmaker, and the
memories' read path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings
from app.storage_refusals import StorageRefusals

if TYPE_CHECKING:
    from app.db.supervisor import EmbeddedSupervisor
    from app.llm.gemini import SharedClient
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
    # The Gemini client of those calls, closed with the state's owner (main's lifespan, the CLI).
    briefing_client: SharedClient | None = None
    # What replaces the raw psycopg pools of this lifespan (capture, memory reads) with fresh
    # ones after the embedded server was restarted: their connections died with it.
    after_restart: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Restarts the embedded server this process serves from, if it dies (None on DATABASE_URL).
    supervisor: EmbeddedSupervisor | None = None
    # The last request the database refused for want of room or a working disk (/health).
    storage_refusals: StorageRefusals = field(default_factory=StorageRefusals)

    async def drop_dead_connections(self) -> None:
        """After the embedded server restarted: every pool's connections died with it, so the
        next use opens a fresh one instead of failing."""
        await self.engine.dispose()
        for replace_pool in self.after_restart:
            await replace_pool()
