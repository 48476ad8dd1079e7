"""The memory block the proxy injects: the context builder, on its own short transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from app.context.builder import build_context
from app.llm.embeddings import Embedder, get_embedder
from app.search.service import SearchTuning
from app.state import AppState

# (project path, prompt, token budget) -> a `<memory>…</memory>` block, or "" for nothing to add.
ContextSource = Callable[[str, str, int], Awaitable[str]]


async def load_embedder(agmem: AppState) -> Embedder:
    """Load the embedder off the event loop, so the first proxied call does not pay for it."""
    return await asyncio.to_thread(get_embedder, agmem.settings)


def make_context_source(agmem: AppState, embedder: Embedder) -> ContextSource:
    """Build `<memory>` blocks for a project from the service's database."""
    settings = agmem.settings
    tuning = SearchTuning.from_settings(settings)

    async def memory_block(project: str, prompt: str, budget: int) -> str:
        async with agmem.sessionmaker() as session, session.begin():
            block = await build_context(
                session,
                project_path=project,
                prompt=prompt or None,
                budget=budget,
                embedder=embedder,
                tuning=tuning,
                max_sessions=settings.context_sessions,
            )
        # A block that only says "nothing remembered yet" costs tokens and tells the model nothing.
        return block.markdown.strip() if block.items else ""

    return memory_block
