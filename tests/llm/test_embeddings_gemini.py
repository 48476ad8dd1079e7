from __future__ import annotations

import asyncio
import json
import socket
from typing import Any
from urllib.parse import quote, quote_plus

import numpy as np
import pytest

from app.llm.embeddings import describe_embedding, get_embedder
from app.llm.gemini_embeddings import EmbeddingFailed, GeminiEmbedder, scrub_key
from tests.conftest import make_settings
from tests.fakes.gemini import FakeGemini, FakeResponse, RecordedRequest, fake_gemini


def vectors_answer(request: RecordedRequest) -> FakeResponse:
    """One 768-wide vector per request, not normalised, distinct per text."""
    out = []
    for item in request.body["requests"]:
        text = item["content"]["parts"][0]["text"]
        width = item.get("outputDimensionality", 3072)
        out.append({"values": [float(len(text) + 1)] + [1.0] * (width - 1)})
    return FakeResponse(200, {"embeddings": out})


def embedder_for(fake: FakeGemini, **overrides: Any) -> tuple[GeminiEmbedder, list[float]]:
    sleeps: list[float] = []
    settings = make_settings(gemini_api_key="k", gemini_base_url=fake.url, **overrides)
    return GeminiEmbedder(settings, retry_base_seconds=0.01, sleep=sleeps.append), sleeps


def test_documents_go_in_calls_of_at_most_100_with_the_right_body() -> None:
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", vectors_answer)
        embedder, _ = embedder_for(fake, embedding_provider="gemini")
        texts = [f"text {i}" for i in range(250)]

        vectors = embedder.embed_documents(texts)

        calls = fake.calls(":batchEmbedContents")
        assert [len(c.body["requests"]) for c in calls] == [100, 100, 50]
        assert calls[0].path.startswith("/v1/models/gemini-embedding-001:batchEmbedContents")
        assert calls[0].headers["x-goog-api-key"] == "k"
        first = calls[0].body["requests"][0]
        assert first == {
            "content": {"parts": [{"text": "text 0"}], "role": "user"},
            "taskType": "RETRIEVAL_DOCUMENT",
            "outputDimensionality": 768,
            "model": "models/gemini-embedding-001",
        }
        assert [
            r["content"]["parts"][0]["text"] for c in calls for r in c.body["requests"]
        ] == texts
    assert vectors.shape == (250, 768)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert embedder.identity == "gemini:gemini-embedding-001:768"


def test_query_uses_retrieval_query_and_configured_model_and_width() -> None:
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", vectors_answer)
        embedder, _ = embedder_for(fake, embedding_model="my-embed", embedding_dims=256)

        vector = embedder.embed_query("where is the jwt check")

        (call,) = fake.calls(":batchEmbedContents")
        assert call.path.startswith("/v1/models/my-embed:")
        assert call.body["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
        assert call.body["requests"][0]["outputDimensionality"] == 256
    assert vector.shape == (256,)
    assert embedder.identity == "gemini:my-embed:256"


def test_a_query_goes_to_gemini_without_its_private_spans_and_secrets() -> None:
    # A search's query, a context prompt and a proxied prompt are embedded as they were typed:
    # nothing sanitized them on their way to Google, unlike every text the service stores.
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", vectors_answer)
        embedder, _ = embedder_for(fake)

        embedder.embed_query(
            "deploy <private>to my home server</private> with ghp_" + "a" * 36 + " as the token"
        )

        (call,) = fake.calls(":batchEmbedContents")
        text = call.body["requests"][0]["content"]["parts"][0]["text"]
        assert text == "deploy  with [REDACTED] as the token"

        # Nothing left to send: no call, and a zero vector, which search takes as no vector.
        vector = embedder.embed_query("<private>my home server</private>")
        assert len(fake.calls(":batchEmbedContents")) == 1
    assert not vector.any()


def test_429_and_5xx_are_retried_with_growing_backoff() -> None:
    with fake_gemini() as fake:
        fake.queue(
            ":batchEmbedContents",
            FakeResponse(
                429,
                {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}},
            ),
            FakeResponse(503, {"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}),
            FakeResponse(500, {"error": {"code": 500, "message": "oops", "status": "INTERNAL"}}),
        )
        fake.on(":batchEmbedContents", vectors_answer)
        embedder, sleeps = embedder_for(fake)

        vectors = embedder.embed_documents(["a", "b"])

        assert len(fake.calls(":batchEmbedContents")) == 4
    assert vectors.shape == (2, 768)
    assert len(sleeps) == 3
    assert sleeps[0] < 0.011
    assert 0.02 <= sleeps[2] <= 0.04  # base 0.01 doubled twice, with jitter in [0.5, 1)


def test_gives_up_after_the_retry_budget_and_never_retries_4xx() -> None:
    with fake_gemini() as fake:
        fake.on(
            ":batchEmbedContents",
            lambda r: FakeResponse(
                429, {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
            ),
        )
        embedder, sleeps = embedder_for(fake, gemini_embed_max_retries=2)
        with pytest.raises(EmbeddingFailed, match="429"):
            embedder.embed_documents(["a"])
        assert len(fake.calls(":batchEmbedContents")) == 3
        assert len(sleeps) == 2

    with fake_gemini() as fake:
        fake.on(
            ":batchEmbedContents",
            lambda r: FakeResponse(
                400, {"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}
            ),
        )
        embedder, sleeps = embedder_for(fake)
        with pytest.raises(EmbeddingFailed, match="400 bad"):
            embedder.embed_documents(["a"])
        assert len(fake.calls(":batchEmbedContents")) == 1
        assert sleeps == []


def test_a_429s_retry_after_is_waited_and_one_past_the_backoff_cap_fails_at_once() -> None:
    # The backoff retried after 1, 2, 4, 8 and 16 s whatever the server asked: a Retry-After of
    # 45 s spent the whole budget on calls sure to be refused, and one of 7 s got a 429 at 1 s.
    quota = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
    with fake_gemini() as fake:
        fake.queue(
            ":batchEmbedContents",
            FakeResponse(429, quota, headers={"Retry-After": "7"}),
            FakeResponse(200, {"embeddings": [{"values": [1.0] * 768}]}),
            FakeResponse(429, quota, headers={"Retry-After": "45"}),
        )
        embedder, sleeps = embedder_for(fake)

        assert embedder.embed_documents(["a"]).shape == (1, 768)
        assert sleeps == [7.0]
        with pytest.raises(EmbeddingFailed, match="429 quota.*retry in 45 s"):
            embedder.embed_documents(["a"])
        assert sleeps == [7.0]
        assert len(fake.calls(":batchEmbedContents")) == 3

        # Someone waits for a search's query: it fails at once (keyword ranking then).
        fake.queue(":batchEmbedContents", FakeResponse(429, quota, headers={"Retry-After": "7"}))
        with pytest.raises(EmbeddingFailed, match="retry in 7 s"):
            embedder.embed_query("a")
        assert sleeps == [7.0]


def test_wrong_count_or_width_is_an_error_not_a_bad_vector() -> None:
    with fake_gemini() as fake:
        fake.queue(
            ":batchEmbedContents", FakeResponse(200, {"embeddings": [{"values": [1.0] * 768}]})
        )
        fake.queue(
            ":batchEmbedContents", FakeResponse(200, {"embeddings": [{"values": [1.0] * 12}] * 2})
        )
        embedder, _ = embedder_for(fake)
        with pytest.raises(EmbeddingFailed, match="1 embeddings for 2 texts"):
            embedder.embed_documents(["a", "b"])
        with pytest.raises(EmbeddingFailed, match="not 768 wide"):
            embedder.embed_documents(["a", "b"])


def test_vectors_with_nan_or_no_direction_are_an_error_not_a_stored_vector() -> None:
    # Postgres refuses a NaN in a vector: it surfaced as a database error, which charged the
    # rows no attempt, so the worker paid Gemini for the same rows every poll, for ever; a zero
    # vector has no cosine distance to anything.
    with fake_gemini() as fake:
        fake.queue(
            ":batchEmbedContents",
            FakeResponse(200, {"embeddings": [{"values": [float("nan")] + [1.0] * 767}] * 2}),
            FakeResponse(200, {"embeddings": [{"values": [float("inf")] + [1.0] * 767}] * 2}),
            FakeResponse(200, {"embeddings": [{"values": [1.0] * 768}, {"values": [0.0] * 768}]}),
        )
        embedder, _ = embedder_for(fake)
        with pytest.raises(EmbeddingFailed, match="NaN or infinite"):
            embedder.embed_documents(["a", "b"])
        with pytest.raises(EmbeddingFailed, match="NaN or infinite"):
            embedder.embed_documents(["a", "b"])
        with pytest.raises(EmbeddingFailed, match="all zeros"):
            embedder.embed_documents(["a", "b"])


def test_get_embedder_and_describe_agree_for_gemini() -> None:
    with fake_gemini() as fake:
        settings = make_settings(
            gemini_api_key="k", gemini_base_url=fake.url, embedding_provider="gemini"
        )
        embedder = get_embedder(settings)
        described = describe_embedding(settings)
    assert embedder.identity == f"gemini:{described['model']}:{described['dims']}"


def test_an_unreachable_gemini_is_retried_then_one_clear_error() -> None:
    # google-genai 3 raises httpx2's errors, which `except httpx.TransportError` let through.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    sleeps: list[float] = []
    settings = make_settings(gemini_api_key="k", gemini_base_url=f"http://127.0.0.1:{closed_port}")
    embedder = GeminiEmbedder(settings, retry_base_seconds=0.01, sleep=sleeps.append)

    with pytest.raises(EmbeddingFailed, match="unreachable"):
        embedder.embed_documents(["a"])
    assert len(sleeps) == settings.gemini_embed_max_retries
    assert embedder.batch_result("batches/job-1", 1) is None  # polled again later


@pytest.mark.parametrize("key", ["s\u00e9cret-KEY-0042", "secret\x00KEY-0042"])
def test_a_key_the_client_cannot_send_is_not_in_the_error(key: str) -> None:
    # httpx's error for a NUL in a header quotes the header's value: the key, in the sync's
    # report and log.
    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", vectors_answer)
        # Settings refuse such a key (tests/test_settings.py); set past that check, the
        # scrub of every Gemini error is the second line.
        settings = make_settings(gemini_base_url=fake.url, gemini_embed_max_retries=0).model_copy(
            update={"gemini_api_key": key}
        )
        embedder = GeminiEmbedder(settings, retry_base_seconds=0.01, sleep=lambda _: None)
        with pytest.raises(EmbeddingFailed) as raised:
            embedder.embed_documents(["a text"])
        with pytest.raises(EmbeddingFailed) as submitted:
            embedder.submit_batch(["a text"], label="agmem-x")
    for error in (raised.value, submitted.value):
        assert "KEY-0042" not in str(error)
        assert "KEY-0042" not in repr(error)


def test_a_short_key_is_scrubbed_only_where_it_stands_whole() -> None:
    # The key "k" replaced everywhere made Gemini's own words unreadable in cancel_error.
    with fake_gemini() as fake:
        fake.on(
            "batches/job-1:cancel",
            lambda _r: FakeResponse(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "API key not valid. Please pass a valid API key. (k)",
                        "status": "INVALID_ARGUMENT",
                    }
                },
            ),
        )
        embedder, _ = embedder_for(fake)
        outcome = asyncio.run(embedder.cancel_batch("batches/job-1"))

    assert outcome.status == "pending"
    assert outcome.error == (
        "cancel refused: 400 INVALID_ARGUMENT API key not valid. Please pass a valid API key. "
        "(<GEMINI_API_KEY>)"
    )


def test_a_key_as_long_as_a_real_one_is_scrubbed_wherever_it_stands() -> None:
    key = "AIza" + "x9_-" * 8 + "abc"  # 39 characters, as Gemini's keys are
    assert len(key) == 39
    text = f"Illegal header value b'{key}'; {key}suffix, prefix{key}"

    assert scrub_key(text, key) == (
        "Illegal header value b'<GEMINI_API_KEY>'; <GEMINI_API_KEY>suffix, prefix<GEMINI_API_KEY>"
    )
    assert scrub_key("keys: k, kk, k-1, xk", "k") == "keys: <GEMINI_API_KEY>, kk, k-1, xk"


@pytest.mark.parametrize(
    "quoted",
    [
        repr("failed:\n" + "gw-key-2025"),
        repr(("failed:\n" + "gw-key-2025").encode()),
        json.dumps({"k": "line\n" + "gw-key-2025"}),
        json.dumps({"k": "caf\u00e9" + "gw-key-2025"}),
        "?key%3D" + "gw-key-2025",
        quote("?key=gw-key-2025", safe=""),
    ],
)
def test_a_short_key_right_after_an_escape_is_scrubbed(quoted: str) -> None:
    # Only "where it stands whole", the key after a repr's `\n` or a URL's `%3D` stood next to a
    # letter or digit and was kept as it was.
    assert "gw-key-2025" in quoted
    assert "gw-key-2025" not in scrub_key(quoted, "gw-key-2025")


@pytest.mark.parametrize("key", ["a+b/c=d", "AIza" + "x9+/" * 8 + "ab="])
def test_a_key_is_scrubbed_as_a_url_quotes_it(key: str) -> None:
    for quoted in (quote(key, safe=""), quote_plus(key, safe="")):
        assert quoted != key
        assert quoted not in scrub_key(f"GET /v1/models?key={quoted}&alt=sse", key)
