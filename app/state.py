"""What a running app holds: settings, the database engine and its sessionmaker."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.config import Settings


@dataclass(slots=True)
class AppState:
    settings: Settings
    database_url: str
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
