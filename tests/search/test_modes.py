"""Fusion modes, filters, relevance cuts and the vector branch's plan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.vector_index import hnsw_index_ddl, hnsw_index_name
from app.index.embedding import vector_literal
from app.llm.embeddings import local_embedder
from app.search.fusion import RRF_K
from app.search.queries import (
    EF_SEARCH_FLOOR,
    SCAN_DEFAULTS_FLAG,
    SearchFilters,
    configure_vector_scan,
    search_statement,
)
from app.search.schemas import SearchRequest, SearchResponse
from app.search.service import SearchTuning
from app.search.service import search as search_service
from tests.search.seed import Chunk, add_chunks, in_session

OLD = datetime(2025, 1, 1, tzinfo=UTC)
NEW = datetime(2026, 6, 1, tzinfo=UTC)

CORPUS = [
    Chunk("Postgres connection pool exhausted under load; raised pool_size to 20.", path="db.md"),
    Chunk("The database pool ran out of connections during the load test.", path="notes/db2.md"),
    Chunk("Use the refreshToken endpoint to rotate JWT credentials.", path="auth/jwt.md"),
    Chunk("Garden notes: tomatoes need sun.", path="garden.md"),
    Chunk(
        "Observation: pytest failed with ImportError in conftest.",
        source="observation",
        path=None,
        start_line=None,
        end_line=None,
        created_at=OLD,
    ),
    Chunk("Pool sizing for Postgres in another project.", project="/other", path="db.md"),
    Chunk("Connection pool tuning 100% done", path="notes/100%_pool.md", created_at=NEW),
]


def search(client: TestClient, query: str, **body: Any) -> list[dict[str, Any]]:
    payload = {"query": query, "projectPath": "/p", **body}
    response = client.post("/api/search", json=payload)
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


@pytest.fixture
def corpus(database_url: str, db: psycopg.Connection[Any]) -> list[int]:
    return add_chunks(database_url, CORPUS)


def test_hybrid_is_rrf_of_both_ranks(client: TestClient, corpus: list[int]) -> None:
    results = search(client, "postgres connection pool")
    assert results, "hybrid found nothing"
    content = {r["id"]: r["content"].lower() for r in results}
    for result in results:
        # A keyword rank counts in full for a row holding every query word, at half for two or
        # more, at a tenth for one (the tier weights' defaults).
        held = sum(word in content[result["id"]] for word in ("postgres", "connection", "pool"))
        tier_weight = {3: 1.0, 2: 0.5}.get(held, 0.1)
        expected = (1 / (RRF_K + result["vectorRank"]) if result["vectorRank"] else 0) + (
            tier_weight / (RRF_K + result["keywordRank"]) if result["keywordRank"] else 0
        )
        assert result["score"] == pytest.approx(expected)
    both = [r for r in results if r["vectorRank"] is not None and r["keywordRank"] is not None]
    assert both, "no result was found by both branches"
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    top = results[0]
    for field in ("id", "source", "content", "path", "startLine", "endLine", "createdAt"):
        assert field in top
    assert "tookMs" in client.post("/api/search", json={"query": "pool"}).json()


def test_hybrid_with_full_tier_weights_is_plain_rrf(database_url: str, corpus: list[int]) -> None:
    tuning = SearchTuning(tier_weights=(1.0, 1.0))

    async def go(session: AsyncSession) -> SearchResponse:
        request = SearchRequest(query="postgres connection pool", project_path="/p")
        return await search_service(
            session, request=request, embedder=local_embedder(), tuning=tuning
        )

    results = in_session(database_url, go).results
    assert results
    assert any(r.keyword_rank for r in results)
    for result in results:
        expected = sum(
            1 / (RRF_K + rank) for rank in (result.vector_rank, result.keyword_rank) if rank
        )
        assert result.score == pytest.approx(expected)


def test_each_mode_reports_its_own_branch(client: TestClient, corpus: list[int]) -> None:
    vector = search(client, "database connections exhausted", mode="vector")
    assert vector
    assert all(r["keywordRank"] is None for r in vector)
    assert [r["vectorRank"] for r in vector] == list(range(1, len(vector) + 1))
    assert all(-1 <= r["score"] <= 1 for r in vector)
    keyword = search(client, "database connections exhausted", mode="keyword")
    assert keyword
    assert all(r["vectorRank"] is None for r in keyword)
    assert [r["keywordRank"] for r in keyword] == list(range(1, len(keyword) + 1))
    weighted = search(client, "database connections exhausted", mode="weighted")
    for result in weighted:
        vector_part = 0.7 * (result["vectorScore"] or 0)
        assert result["score"] >= vector_part - 1e-9
        assert result["score"] <= vector_part + 0.3 + 1e-9
    best_text = max(weighted, key=lambda r: r["keywordScore"] or 0)
    assert best_text["score"] == pytest.approx(0.7 * (best_text["vectorScore"] or 0) + 0.3)


def test_limit_and_invalid_bodies(client: TestClient, corpus: list[int]) -> None:
    assert len(search(client, "pool", limit=2)) == 2
    for body in (
        {"query": "pool", "limit": 101},
        {"query": "pool", "limit": 0},
        {"query": "pool", "mode": "fuzzy"},
        {"query": "pool", "sources": ["files"]},
        {"query": 5},
        {},
    ):
        response = client.post("/api/search", json=body)
        assert response.status_code == 422, body
    # Python's JSON parser takes NaN; compared with it, every score failed and the answer was [].
    for min_score in (b"NaN", b"Infinity"):
        response = client.post(
            "/api/search",
            content=b'{"query": "pool", "minScore": ' + min_score + b"}",
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 422, min_score
        assert "minScore" in response.json()["detail"]
    # pydantic reads JSON `true` as 1: `limit: true` answered one result, `minScore: true` none.
    for field in ("limit", "minScore"):
        response = client.post("/api/search", json={"query": "pool", field: True})
        assert response.status_code == 422, field
        assert response.json()["detail"] == f"{field}: must be a number, not a boolean"
    # A NUL in a filter reached Postgres, which refused it: 422 quoting the database.
    nul = client.post("/api/search", json={"query": "po\u0000ol", "projectPath": "/p\u0000"})
    assert nul.status_code == 200
    # A lone surrogate is cleaned as in stored text (it was a 422 "not a valid string").
    lone = client.post(
        "/api/search",
        content=b'{"query": "pool \\ud800", "pathPrefix": "a\\udc00"}',
        headers={"content-type": "application/json"},
    )
    assert lone.status_code == 200, lone.text
    response = client.post(
        "/api/search", json={"query": "pool", "since": NEW.isoformat(), "until": OLD.isoformat()}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "InvalidSearchFilter"
    # No source at all matches nothing: it answered an empty list, as if nothing were found.
    response = client.post("/api/search", json={"query": "pool", "sources": []})
    assert response.status_code == 400
    assert response.json() == {
        "error": "InvalidSearchFilter",
        "detail": "sources is empty: name at least one source, or leave it out for every source",
    }


@pytest.mark.parametrize("mode", ["hybrid", "weighted", "vector", "keyword"])
def test_filters_apply_to_both_branches(client: TestClient, corpus: list[int], mode: str) -> None:
    query = "postgres pool pytest connection"
    everything = search(client, query, mode=mode, projectPath=None, limit=50)
    assert {r["path"] for r in everything if r["path"]} >= {"db.md", "notes/db2.md"}
    assert any(r["content"].startswith("Pool sizing") for r in everything)

    scoped = search(client, query, mode=mode, limit=50)
    assert scoped
    assert all(not r["content"].startswith("Pool sizing") for r in scoped)

    observations = search(client, query, mode=mode, sources=["observation"], limit=50)
    assert observations
    assert all(r["source"] == "observation" for r in observations)

    under_notes = search(client, query, mode=mode, pathPrefix="notes/", limit=50)
    assert under_notes
    assert all(r["path"].startswith("notes/") for r in under_notes)
    # LIKE wildcards in the prefix are literal.
    literal = search(client, query, mode=mode, pathPrefix="notes/100%", limit=50)
    assert [r["path"] for r in literal] == ["notes/100%_pool.md"]
    assert search(client, query, mode=mode, pathPrefix="notes/1_0", limit=50) == []

    recent = search(client, query, mode=mode, since=(OLD + timedelta(days=1)).isoformat())
    assert recent
    assert all(r["source"] != "observation" for r in recent)
    old = search(client, query, mode=mode, until=(OLD + timedelta(days=1)).isoformat())
    assert [r["source"] for r in old] == ["observation"]


def test_min_score_and_floors_give_nothing_instead_of_noise(
    client: TestClient, corpus: list[int], settings: Any
) -> None:
    assert search(client, "pool", minScore=1.0) == []
    kept = search(client, "pool", minScore=1 / (RRF_K + 1))
    assert kept
    assert all(r["score"] >= 1 / (RRF_K + 1) for r in kept)
    # A query that matches no word still has vector neighbours; the floor removes them.
    assert search(client, "zebra quasar marmalade", mode="vector")
    assert search(client, "zebra quasar marmalade", mode="vector", minScore=0.99) == []


def test_vector_floor_setting_cuts_weak_neighbours(
    database_url: str, db: psycopg.Connection[Any], settings: Any
) -> None:
    from app.main import create_app
    from tests.conftest import make_settings

    add_chunks(database_url, CORPUS)
    strict = make_settings(home=settings.home, search_vector_floor=0.99)
    with TestClient(create_app(strict, database_url=database_url)) as client:
        assert search(client, "zebra quasar marmalade", mode="vector") == []
        assert search(client, "zebra quasar marmalade") == []


def test_vector_branch_uses_the_models_hnsw_index_under_a_project_filter(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    add_chunks(database_url, CORPUS[:2])
    embedder = local_embedder()
    # Enough rows that an exact sort costs more than the index; built in bulk, then indexed.
    index = hnsw_index_name(embedder.identity)
    db.execute(f"DROP INDEX IF EXISTS {index}")
    db.execute(
        "INSERT INTO memory_chunks (project_path, source, content, hash, embedding, model) "
        # Every 25th row a global memory's (kv, no project), which the project filter includes.
        "SELECT CASE WHEN g %% 4 = 0 THEN '/q' WHEN g %% 25 = 1 THEN '' ELSE '/p' END, "
        "CASE WHEN g %% 25 = 1 THEN 'kv' ELSE 'memory' END, 'row ' || g, "
        "md5(g::text), (SELECT array_agg(random() - 0.5)::float4[] FROM generate_series(1, %s) "
        " WHERE g > 0)::vector, %s FROM generate_series(1, 12000) g",
        (embedder.dims, embedder.identity),
    )
    db.execute("SET maintenance_work_mem = '256MB'")
    db.execute(hnsw_index_ddl(embedder.identity, embedder.dims))
    db.execute("ANALYZE memory_chunks")
    statement = search_statement(
        "vector",
        embedder.identity,
        embedder.dims,
        SearchFilters(project_path="/p").shape(),
        True,
        False,
    )
    params = {
        "qvec": vector_literal(embedder.embed_query("database pool")),
        "f_project": "/p",
        "candidates": 40,
        "limit": 10,
        "min_score": -1.0,
        "vector_floor": 0.0,
    }

    async def explain(session: AsyncSession) -> str:
        await configure_vector_scan(session, candidates=40)
        rows = await session.execute(text("EXPLAIN " + str(statement)), params)
        return "\n".join(row[0] for row in rows)

    plan = in_session(database_url, explain)
    assert hnsw_index_name(embedder.identity) in plan, plan
    assert "Index Scan" in plan
    assert "project_path = ''::text" in plan, plan  # the filter explained is the project's reach


def test_snippets_can_be_left_out_for_callers_that_read_content(
    database_url: str, corpus: list[int]
) -> None:
    async def both(session: AsyncSession) -> tuple[SearchResponse, SearchResponse]:
        request = SearchRequest(query="postgres connection pool", project_path="/p")
        embedder = local_embedder()
        full = await search_service(session, request=request, embedder=embedder)
        bare = await search_service(session, request=request, embedder=embedder, snippets=False)
        return full, bare

    full, bare = in_session(database_url, both)
    assert [r.id for r in full.results] == [r.id for r in bare.results]
    assert any("**pool**" in r.snippet.lower() for r in full.results)
    assert all(r.snippet == "" for r in bare.results)
    assert [r.content for r in full.results] == [r.content for r in bare.results]


def test_vector_scan_settings_keep_the_recall_floor(database_url: str, db: Any) -> None:
    async def settings_after(session: AsyncSession, candidates: int) -> tuple[str, str]:
        await configure_vector_scan(session, candidates=candidates)
        row = (
            await session.execute(
                text(
                    "SELECT current_setting('hnsw.ef_search'), "
                    "current_setting('hnsw.iterative_scan')"
                )
            )
        ).one()
        return row[0], row[1]

    assert in_session(database_url, lambda s: settings_after(s, 40)) == (
        str(EF_SEARCH_FLOOR),
        "relaxed_order",
    )
    assert EF_SEARCH_FLOOR >= 160  # 0.963 recall@10 at 100k rows; 100 gave 0.939
    assert in_session(database_url, lambda s: settings_after(s, 400))[0] == "400"


def test_pooled_connections_start_with_the_scan_settings(database_url: str, db: Any) -> None:
    # A search with the default candidate count relies on these and sends no `set_config`.
    async def settings_now(session: AsyncSession) -> tuple[str, str, bool]:
        row = (
            await session.execute(
                text(
                    "SELECT current_setting('hnsw.ef_search'), "
                    "current_setting('hnsw.iterative_scan')"
                )
            )
        ).one()
        connection = await session.connection()
        return row[0], row[1], bool(connection.info.get(SCAN_DEFAULTS_FLAG))

    assert in_session(database_url, settings_now) == (str(EF_SEARCH_FLOOR), "relaxed_order", True)
