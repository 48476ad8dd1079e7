"""The exact-phrase boost: code identifiers and quoted phrases found literally rank first."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from app.llm.embeddings import local_embedder
from app.search.fusion import RRF_K
from app.search.queries import exact_phrases
from app.search.schemas import SearchMode, SearchRequest, SearchResponse
from app.search.service import SearchTuning, search
from tests.search.seed import Chunk, add_chunks, in_session

NOISE = [
    Chunk(f"The model service and the router service share the model cache {n}.", path=f"{n}.md")
    for n in range(8)
]
TARGET = Chunk("Requests go through modelRouterService before dispatch.", path="router.md")
PATHED = Chunk("Settings are read once at startup.", path="src/core/settings_loader.py")
QUOTED = Chunk("The deploy failed: connection refused by the registry.", path="deploy.md")
SCATTERED = Chunk("The registry refused; the connection was reset later.", path="reset.md")


@pytest.mark.parametrize(
    ("query", "phrases"),
    [
        ("modelRouterService", ["modelrouterservice"]),
        ("where is RateLimiter.hit called?", ["ratelimiter.hit"]),
        ("t.Parallel()", ["t.parallel"]),
        ("ParseMode::UsageOnly", ["parsemode::usageonly"]),
        ("the pool_size, please", ["pool_size"]),
        ("src/core/settings_loader.py", ["src/core/settings_loader.py"]),
        ('"connection   refused" on deploy', ["connection refused"]),
        ("how do I run the tests?", []),
        ("e.g. i.e. a_b", []),  # shorter than four characters
        ("CI is slow", []),
    ],
)
def test_exact_phrases_are_quoted_text_and_code_shaped_tokens(
    query: str, phrases: list[str]
) -> None:
    assert exact_phrases(query) == phrases


def test_exact_phrases_are_capped() -> None:
    assert len(exact_phrases(" ".join(f"name_{n:02}" for n in range(10)))) == 4


def run(database_url: str, query: str, tuning: SearchTuning, mode: SearchMode = "hybrid") -> Any:
    async def go(session: AsyncSession) -> SearchResponse:
        request = SearchRequest(query=query, project_path="/p", mode=mode, limit=20)
        return await search(session, request=request, embedder=local_embedder(), tuning=tuning)

    return in_session(database_url, go).results


@pytest.fixture
def chunks(database_url: str, db: psycopg.Connection[Any]) -> list[int]:
    return add_chunks(database_url, [*NOISE, TARGET, PATHED, QUOTED, SCATTERED])


@pytest.mark.usefixtures("chunks")
def test_an_identifier_found_literally_gains_one_first_rank(database_url: str) -> None:
    boosted = run(database_url, "modelRouterService", SearchTuning())
    plain = {
        r.id: r.score for r in run(database_url, "modelRouterService", SearchTuning(exact_weight=0))
    }
    assert "modelRouterService" in boosted[0].content
    for result in boosted:
        gain = 1 / (RRF_K + 1) if "modelRouterService" in result.content else 0.0
        assert result.score == pytest.approx(plain[result.id] + gain)


@pytest.mark.usefixtures("chunks")
def test_paths_and_quoted_phrases_are_matched_literally(database_url: str) -> None:
    by_path = run(database_url, "src/core/settings_loader.py", SearchTuning())
    assert by_path[0].path == "src/core/settings_loader.py"
    quoted = run(database_url, '"Connection refused"', SearchTuning())
    assert quoted[0].content == QUOTED.content
    scattered = next(r for r in quoted if r.content == SCATTERED.content)
    plain = run(database_url, '"Connection refused"', SearchTuning(exact_weight=0))
    assert scattered.score == pytest.approx(
        next(r.score for r in plain if r.content == SCATTERED.content)
    )


@pytest.mark.usefixtures("chunks")
@pytest.mark.parametrize("mode", ["keyword", "vector", "weighted"])
def test_only_hybrid_is_boosted(database_url: str, mode: SearchMode) -> None:
    boosted = run(database_url, "modelRouterService", SearchTuning(), mode)
    plain = run(database_url, "modelRouterService", SearchTuning(exact_weight=0), mode)
    assert [(r.id, r.score) for r in boosted] == [(r.id, r.score) for r in plain]


@pytest.mark.usefixtures("chunks")
def test_hostile_phrases_are_plain_data(database_url: str) -> None:
    for query in ['"%_\\\\"', "a_%b::'c'", '"\'; DROP TABLE memory_chunks; --"']:
        run(database_url, query, SearchTuning())
    assert run(database_url, "modelRouterService", SearchTuning())
