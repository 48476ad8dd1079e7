"""build_context called the way the Gemini proxy and the MCP server call it."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from app.context.builder import ContextBlock, build_context
from app.context.tokens import estimate_tokens, truncate_to_tokens
from app.llm.embeddings import local_embedder
from tests.search.seed import Chunk, add_chunks, add_session, in_session


def test_build_context_returns_markdown_tokens_and_items(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_session(database_url, "s1", summary="Added retries to the DHL client.", prompt="DHL")
    add_chunks(database_url, [Chunk("DHL labels come back as PDF URLs.", path="dhl.md")])

    async def work(session: AsyncSession) -> ContextBlock:
        return await build_context(
            session,
            project_path="/p",
            prompt="dhl label pdf",
            budget=300,
            embedder=local_embedder(),
        )

    block = in_session(database_url, work)
    assert block.markdown.startswith("<memory>")
    assert block.token_count == estimate_tokens(block.markdown) <= 300
    assert [item.source for item in block.items] == ["summary", "memory"]
    assert "`dhl.md#L1-L5`" in block.markdown


def test_truncation_stays_within_the_tokens_it_is_given() -> None:
    text = "word " * 500
    for tokens in (1, 5, 17, 100, 1000):
        cut = truncate_to_tokens(text, tokens)
        assert estimate_tokens(cut) <= tokens
    assert truncate_to_tokens("short", 10) == "short"
