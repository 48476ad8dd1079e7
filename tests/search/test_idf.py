"""Keyword ranking by BM25 IDF: a query word counts by its rarity in the index."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import SettingsError
from app.llm.embeddings import local_embedder
from app.search.queries import bm25_idf, idf_operands
from app.search.schemas import SearchRequest
from app.search.service import SearchTuning, search
from app.search.term_stats import TERM_STATS, TermStats
from tests.conftest import make_settings
from tests.search.seed import Chunk, add_chunks, in_session

REPEATS_COMMON_WORD = "deploy deploy deploy deploy the deploy notes"
HOLDS_RARE_WORD = "kubernetes cluster notes for the shop"


def test_bm25_idf_falls_as_a_word_gets_common() -> None:
    assert bm25_idf(0.001, 10_000) > bm25_idf(0.05, 10_000) > bm25_idf(0.5, 10_000) > 0
    assert bm25_idf(1.0, 10_000) > 0  # a word in every row still counts a little


def test_idf_operands_match_the_or_query_operands() -> None:
    assert idf_operands(["the", "deploy", "kubernetes"]) == {
        "deploy": "'deploy'",
        "kubernetes": "'kubernetes':*",
    }
    assert idf_operands(["deploy", "ku"]) == {"deploy": "'deploy'", "ku": "'ku'"}


@pytest.fixture
def deploy_index(database_url: str, db: psycopg.Connection[Any]) -> list[int]:
    """`deploy` in most rows, `kubernetes` in one; analysed, with the statistics cache reset."""
    ids = add_chunks(
        database_url,
        [Chunk(REPEATS_COMMON_WORD), Chunk(HOLDS_RARE_WORD)]
        + [Chunk(f"deploy step {n} of the release checklist") for n in range(60)],
        embed=False,
    )
    db.execute("ANALYZE memory_chunks")
    TERM_STATS.snapshots.clear()
    return ids


@pytest.mark.usefixtures("deploy_index")
def test_term_stats_give_common_words_a_low_idf(database_url: str) -> None:
    async def idf(session: AsyncSession) -> dict[str, float]:
        return await TermStats().idf(session, ["deploy", "kubernetes", "zebra"])

    weights = in_session(database_url, idf)
    assert weights["deploy"] < 1.0 < weights["kubernetes"]
    # A word pg_stats does not list is rarer than every listed one.
    assert weights["zebra"] >= weights["kubernetes"]


def test_term_stats_weigh_every_word_alike_without_statistics(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # The `db` fixture truncated the table: its row estimate is unknown until the next ANALYZE.
    async def idf(session: AsyncSession) -> dict[str, float]:
        return await TermStats().idf(session, ["deploy", "kubernetes"])

    assert in_session(database_url, idf) == {"deploy": 1.0, "kubernetes": 1.0}


def keyword_contents(database_url: str, query: str, tuning: SearchTuning) -> list[str]:
    async def run(session: AsyncSession) -> list[str]:
        request = SearchRequest(query=query, project_path="/p", mode="keyword", limit=5)
        response = await search(session, request=request, embedder=local_embedder(), tuning=tuning)
        return [r.content for r in response.results]

    return in_session(database_url, run)


@pytest.mark.usefixtures("deploy_index")
def test_the_row_holding_the_rare_word_ranks_first(database_url: str) -> None:
    query = "deploy to kubernetes"
    # ts_rank alone counts `deploy` five times over the one `kubernetes`.
    assert keyword_contents(database_url, query, SearchTuning(rank_function="ts_rank"))[0] == (
        REPEATS_COMMON_WORD
    )
    assert keyword_contents(database_url, query, SearchTuning())[0] == HOLDS_RARE_WORD


@pytest.mark.usefixtures("deploy_index")
def test_hybrid_and_weighted_rank_with_idf_too(database_url: str) -> None:
    async def run(session: AsyncSession) -> dict[str, list[str]]:
        found = {}
        for mode in ("hybrid", "weighted"):
            request = SearchRequest(query="kubernetes", project_path="/p", mode=mode, limit=3)
            response = await search(session, request=request, embedder=local_embedder())
            found[mode] = [r.content for r in response.results]
        return found

    found = in_session(database_url, run)
    assert found["hybrid"][0] == HOLDS_RARE_WORD
    assert found["weighted"][0] == HOLDS_RARE_WORD


def test_the_rank_function_is_a_setting() -> None:
    assert SearchTuning.from_settings(make_settings()).rank_function == "idf"
    tuning = SearchTuning.from_settings(make_settings(search_rank_function="ts_rank"))
    assert tuning.rank_function == "ts_rank"
    with pytest.raises(SettingsError) as raised:
        make_settings(search_rank_function="bm25")
    assert str(raised.value).startswith("invalid setting AGMEM_SEARCH_RANK_FUNCTION: ")
