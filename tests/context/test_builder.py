"""build_context called the way the Gemini proxy and the MCP server call it."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

from app.context.builder import ContextBlock, build_context
from app.context.format import balanced, item_lines, relevant_item
from app.llm.embeddings import local_embedder
from app.tokens import estimate_tokens, truncate_to_tokens
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


def test_a_wide_character_counts_as_a_token() -> None:
    # Tokenisers give a CJK character, kana, hangul or emoji a token or more each, where four
    # ASCII characters share one: at four characters a token, a 2,000-token block of Chinese
    # transcript held ~1,400 ideographs plus the rest, well over its budget in real tokens.
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("架構設計") == 4
    assert estimate_tokens("항구") == 2
    assert estimate_tokens("é → ├──") == 2  # accents, arrows, box drawing: four a token
    assert estimate_tokens("🔥 ok") == 2
    assert estimate_tokens("src/discordbot 是機器人的進入點") == 4 + 8
    mixed = "機器人 bot " * 30
    for tokens in (1, 2, 7, 40, 99):
        cut = truncate_to_tokens(mixed, tokens)
        assert estimate_tokens(cut) <= tokens
        assert mixed.startswith(cut.removesuffix("…"))
    assert len(truncate_to_tokens("機" * 100, 10)) == 10  # nine ideographs and the ellipsis
    for a, b in [("機器", "人 x"), ("abc", "機"), ("ab", "cd 機器人"), ("a" * 5, "b" * 7)]:
        assert estimate_tokens(a + b) <= estimate_tokens(a) + estimate_tokens(b)


def test_a_cjk_block_keeps_to_its_budget_in_characters(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    summary = "這個專案是一個功能豐富的機器人，整合了聊天、影像生成與資料庫功能。" * 60
    add_session(database_url, "s1", summary=summary, prompt="機器人專案")

    async def work(session: AsyncSession) -> ContextBlock:
        return await build_context(
            session, project_path="/p", prompt=None, budget=300, embedder=local_embedder()
        )

    block = in_session(database_url, work)
    assert "這個專案" in block.markdown
    assert sum(not ch.isascii() for ch in block.markdown) <= block.token_count <= 300


def test_balancing_closes_what_a_cut_left_open_and_only_that() -> None:
    assert balanced("run `make te…") == "run `make te…`"
    assert balanced("**Note:** the **clean…") == "**Note:** the **clean…**"
    assert balanced("see `a**b` and ``x`y`` ok") == "see `a**b` and ``x`y`` ok"
    assert balanced("```python\ndef f(**kwargs):…") == "```python\ndef f(**kwargs):…\n```"
    # Code between prose lines counts for neither: `**kwargs` there is no open bold.
    text = "Call it:\n```\nf(**kwargs)\n```\nthen `g` runs."
    assert balanced(text) == text


def test_inline_code_of_three_backticks_is_no_fence() -> None:
    # A backtick fence's info string holds no backtick (CommonMark): "```make test``` first" is
    # inline code. Taken for an opener, it got a closing fence that opened a real one.
    text = "Run it:\n```make test``` first, then `deploy`"
    assert balanced(text) == text
    assert balanced("```make test``` then `depl…") == "```make test``` then `depl…`"


def test_a_one_line_item_keeps_what_closes_it_inside_the_item() -> None:
    # A one-line item went on the item's line and the fence closing it on a line of its own at
    # the margin, outside the list: an opener there, it turned the rest of the block into code.
    for content in ("~~~ notes from the call…", "```bash…"):
        rendered = relevant_item("a.md#L1-L1", "memory", content)
        first, *rest = rendered.rstrip("\n").split("\n")
        assert first == "- `a.md#L1-L1` (memory):"
        assert rest, rendered
        assert all(line.startswith("  ") for line in rest), rendered


def test_a_carriage_return_is_a_line_break_of_the_item() -> None:
    # A captured shell output keeps its progress lines' lone CRs, which markdown reads as line
    # ends: the lines after them stood at the margin, outside the item (a heading of the
    # block's own, an unseen fence that turned the rest of the block into code).
    text = "Result: 10%\r50%\r## Installed\r```\r100%\r\ndone"
    rendered = relevant_item("observation:1", "observation", item_lines(text))
    lines = re.split(r"\r\n|\r|\n", rendered.rstrip("\n"))
    assert lines[0] == "- `observation:1` (observation):"
    assert all(line.startswith("  ") for line in lines[1:]), lines
    assert sum(line.strip().startswith("```") for line in lines) == 2
