"""Searches with the Gemini provider, through the real google-genai client and the fake server:
the query's embedding must neither hold the API's event loop nor, when Gemini fails, the search."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
from fastapi.testclient import TestClient

from app.llm import gemini_embeddings
from app.llm.embeddings import get_embedder
from app.llm.gemini_embeddings import EmbeddingFailed, GeminiEmbedder
from app.main import create_app
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, RecordedRequest, fake_gemini
from tests.search.seed import COPIES_PROMPT, Chunk, add_chunks, add_copies_and_notes

EMBED = ":batchEmbedContents"
PROJECT = "/p"


def unavailable(_request: RecordedRequest) -> FakeResponse:
    return FakeResponse(503, {"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}})


def vectors(request: RecordedRequest) -> FakeResponse:
    return FakeResponse(
        200, {"embeddings": [{"values": [0.5] * 768} for _ in request.body["requests"]]}
    )


def gemini_settings(fake: FakeGemini, tmp_path: Path, **overrides: Any) -> Any:
    return make_settings(
        home=tmp_path / "home",
        gemini_api_key="k",
        gemini_base_url=fake.url,
        embedding_provider="gemini",
        **overrides,
    )


def seed(database_url: str) -> None:
    add_chunks(
        database_url,
        [
            Chunk("The refreshToken endpoint rotates JWT credentials.", path="auth/jwt.md"),
            Chunk("Garden notes: tomatoes need sun.", path="garden.md"),
        ],
        embed=False,
    )


def test_a_query_gets_one_retry_and_a_short_timeout(tmp_path: Path) -> None:
    with fake_gemini() as fake:
        fake.on(EMBED, unavailable)
        embedder = GeminiEmbedder(
            gemini_settings(fake, tmp_path), retry_base_seconds=0.001, sleep=lambda _s: None
        )
        with pytest.raises(EmbeddingFailed, match="503"):
            embedder.embed_query("jwt")
        # A sync's documents keep the whole retry budget (AGMEM_GEMINI_EMBED_MAX_RETRIES, 5).
        assert len(fake.calls(EMBED)) == 2

        # The fake holds the answer until the test ends, and the client's connection is open
        # before the timed call (a document's call, under the client's own 60 s timeout,
        # answered at once): only the read can time out,
        # so the call is sure to reach the fake however late a loaded machine runs the client.
        release = threading.Event()

        def held(_request: RecordedRequest) -> FakeResponse:
            release.wait(30)
            return FakeResponse(200, {"embeddings": []})

        fake.queue(EMBED, FakeResponse(200, {"embeddings": [{"values": [0.5] * 768}]}))
        fake.on(EMBED, held)
        slow = GeminiEmbedder(gemini_settings(fake, tmp_path, gemini_timeout_seconds=0.2))
        try:
            slow.embed_documents(["warm"])
            with pytest.raises(EmbeddingFailed, match="Timeout"):
                slow.embed_query("jwt")
            assert recorded(fake, EMBED, at_least=4) == 4  # a timeout is not retried
        finally:
            release.set()


def dripped(_request: RecordedRequest) -> FakeResponse:
    """An answer of one vector dripped 64 bytes every 0.1 s: each read well inside a 1 s
    timeout, the whole ~2.5 s."""
    body = json.dumps({"embeddings": [{"values": [0.5] * 768}]}).encode()
    return FakeResponse(raw=body, drip_s=0.1, drip_bytes=64)


def test_a_querys_whole_answer_has_the_timeout(tmp_path: Path) -> None:
    # The timeout bounded each read: a dripped answer ran 3.64 s past a 1 s timeout (a search a
    # person waits for) and succeeded.
    with fake_gemini() as fake:
        fake.on(EMBED, dripped)
        embedder = GeminiEmbedder(gemini_settings(fake, tmp_path, gemini_timeout_seconds=1.0))
        started = time.monotonic()
        with pytest.raises(EmbeddingFailed, match="Timeout"):
            embedder.embed_query("jwt")
        took = time.monotonic() - started
        assert len(fake.calls(EMBED)) == 1  # a query's timeout is not retried

    assert took < 2.0


def test_a_document_batchs_whole_answer_has_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gemini_embeddings, "DOCUMENT_TIMEOUT_SECONDS", 1.0)
    with fake_gemini() as fake:
        fake.on(EMBED, dripped)
        embedder = GeminiEmbedder(
            gemini_settings(fake, tmp_path, gemini_embed_max_retries=0), sleep=lambda _s: None
        )
        started = time.monotonic()
        with pytest.raises(EmbeddingFailed, match="Timeout"):
            embedder.embed_documents(["a chunk"])
        took = time.monotonic() - started

    assert took < 2.0


def test_a_querys_normal_answer_is_unchanged(tmp_path: Path) -> None:
    with fake_gemini() as fake:
        fake.on(EMBED, vectors)
        embedder = GeminiEmbedder(gemini_settings(fake, tmp_path, gemini_timeout_seconds=1.0))
        first = embedder.embed_query("jwt")
        second = embedder.embed_query("refresh token")

    assert first.shape == second.shape == (768,)
    assert abs(float(np.linalg.norm(first)) - 1.0) < 1e-5


def recorded(fake: FakeGemini, route: str, *, at_least: int, within: float = 10.0) -> int:
    """The calls of `route` the fake has read, once it has read `at_least` (its threads may
    read a request a little after the client sent it), or after `within` s."""
    deadline = time.monotonic() + within
    while len(fake.calls(route)) < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(fake.calls(route))


def test_one_embedder_per_configuration(tmp_path: Path) -> None:
    with fake_gemini() as fake:
        settings = gemini_settings(fake, tmp_path)

        first = get_embedder(settings)

        assert get_embedder(settings.model_copy()) is first
        assert get_embedder(gemini_settings(fake, tmp_path, embedding_dims=256)) is not first


def test_a_hybrid_search_ranks_by_keywords_when_gemini_fails(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed(database_url)
    with fake_gemini() as fake:
        fake.on(EMBED, unavailable)
        app = create_app(gemini_settings(fake, tmp_path), database_url=database_url)
        with TestClient(app, raise_server_exceptions=False) as client:
            hybrid = client.post("/api/search", json={"query": "refreshToken JWT"})
            context = client.get(
                "/api/context", params={"projectPath": PROJECT, "prompt": "refreshToken JWT"}
            )
            vector = client.post("/api/search", json={"query": "jwt", "mode": "vector"})

    assert hybrid.status_code == 200, hybrid.text
    body = hybrid.json()
    assert [r["path"] for r in body["results"]] == ["auth/jwt.md"]
    assert body["results"][0]["vectorRank"] is None
    assert "keyword ranking only" in body["degraded"]
    assert context.status_code == 200, context.text
    assert "auth/jwt.md" in context.text
    # A vector search has nothing else to rank by.
    assert vector.status_code == 502
    assert vector.json()["error"] == "EmbeddingFailed"


def test_a_search_waiting_on_gemini_does_not_hold_other_requests(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    seed(database_url)
    embedding_started, health_answered = threading.Event(), threading.Event()
    health_while_held: list[bool] = []

    def held(request: RecordedRequest) -> FakeResponse:
        embedding_started.set()
        # Blocked in this call, the event loop could not answer /health and this wait ran out;
        # now the search's embedding waits in a thread while /health is answered.
        health_while_held.append(health_answered.wait(30))
        return vectors(request)

    async def scenario(app: Any) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://agmem") as client,
        ):
            search = asyncio.create_task(client.post("/api/search", json={"query": "jwt"}))
            while not embedding_started.is_set():
                await asyncio.sleep(0.01)
            health = await client.get("/health")
            health_answered.set()
            assert health.status_code == 200
            return await search

    with fake_gemini() as fake:
        fake.on(EMBED, held)
        app = create_app(gemini_settings(fake, tmp_path), database_url=database_url)
        search = asyncio.run(scenario(app))

    assert health_while_held == [True]
    assert search.status_code == 200
    assert search.json()["degraded"] is None


def test_a_context_prompt_is_embedded_once_when_copies_thin_its_first_page(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Copies of one text fill the first page of hits, so the builder asks for a longer one; the
    # second search embedded the prompt again: a second billed round trip to Gemini.
    add_copies_and_notes(database_url)
    prompt = COPIES_PROMPT
    with fake_gemini() as fake:
        fake.on(EMBED, vectors)
        app = create_app(gemini_settings(fake, tmp_path), database_url=database_url)
        with TestClient(app, raise_server_exceptions=False) as client:
            response = client.get(
                "/api/context",
                params={"projectPath": PROJECT, "prompt": prompt, "budget": 3000, "format": "json"},
            )
        texts = [
            request["content"]["parts"][0]["text"]
            for call in fake.calls(EMBED)
            for request in call.body["requests"]
            if request["taskType"] == "RETRIEVAL_QUERY"
        ]

    assert response.status_code == 200, response.text
    cited = [item["path"] for item in response.json()["items"] if item["source"] == "memory"]
    # The longer page was searched: every distinct note is in.
    assert sorted(path for path in cited if path.startswith("note")) == [
        f"note{n}.md" for n in range(5)
    ]
    assert texts == [prompt]
