from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from app.llm.embeddings import (
    EmbeddingProviderUnavailable,
    describe_embedding,
    get_embedder,
    local_embedder,
)
from tests.conftest import make_settings

TESTDATA = Path("/work/shared/testdata")
if not TESTDATA.exists():
    TESTDATA = Path(__file__).resolve().parents[3] / "shared" / "testdata"


def test_local_provider_is_the_default_and_matches_its_description() -> None:
    settings = make_settings()
    embedder = get_embedder(settings)
    assert embedder is local_embedder()
    described = describe_embedding(settings)
    assert embedder.identity == f"local:{described['model']}:{described['dims']}"
    vectors = embedder.embed_documents(["validate the jwt token", "deploy on fridays"])
    assert vectors.shape == (2, 256)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is not None,
    reason="the optional extra is installed",
)
def test_sentence_transformers_without_the_extra_says_how_to_install_it() -> None:
    settings = make_settings(embedding_provider="sentence-transformers")
    with pytest.raises(EmbeddingProviderUnavailable, match="--extra sentence-transformers"):
        get_embedder(settings)


def test_gemini_provider_without_a_key_is_a_clear_error() -> None:
    from app.llm.gemini import GeminiNotConfigured

    with pytest.raises(GeminiNotConfigured, match="GEMINI_API_KEY"):
        get_embedder(make_settings(embedding_provider="gemini"))


def test_local_embedder_matches_wordllamas_own_pooling() -> None:
    embedder = local_embedder()
    texts = [
        "validateToken in auth/jwt.ts " * 40,
        "short",
        "",
        "ünïcode 日本語 and an emoji 🎉",
        "# Header\n\n| a | b |\n|---|---|\n| 1 | 2 |\n",
    ]
    ours = embedder.embed_documents(texts)
    theirs = np.asarray(embedder._model.embed(texts, norm=False), dtype=np.float32)
    norms = np.linalg.norm(theirs, axis=1, keepdims=True)
    norms[norms == 0] = 1.0

    assert ours.shape == (5, 256)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs / norms, atol=1e-6)
    assert not ours[2].any()  # an empty text has no tokens: a zero vector, as wordllama gives


def _wordllama(texts: list[str]) -> np.ndarray:
    embedder = local_embedder()
    theirs = np.asarray(embedder._model.embed(texts, norm=False), dtype=np.float32)
    norms = np.linalg.norm(theirs, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return theirs / norms


TRICKY = [
    "  leading spaces",
    "trailing spaces  ",
    " ",
    "    return x + 1\n\tindented\ttabs",
    "| key | value |\n|---|---|\n| a  | 1 |",
    "a literal \u2581 mark and \u2581\u2581 two",
    "special tokens <s> and </s> and <unk> in text",
    "no-break\u00a0space, emoji 🎉🎉, 日本語, façade",
    "x" * 3000,
    "validateToken(auth/jwt.ts) -> {'ok': True}",
    "build 1234 at 2026-11-22T03:20:00Z, sha a3f9c2e7, 3.5px, v0.8.1, batch979758588.",
    "² and 10² and x²). 7",
]


def test_local_embedder_matches_wordllama_on_real_files_and_odd_spacing() -> None:
    from app.sync.chunking import chunk_markdown

    texts = list(TRICKY)
    for path in sorted(TESTDATA.glob("memory-md/*.md")):
        texts += [c.content for c in chunk_markdown(path.read_text(encoding="utf-8"))]
    assert len(texts) > 30

    # Twice: the second pass is served from the segment cache the first one filled.
    for _ in range(2):
        np.testing.assert_allclose(
            local_embedder().embed_documents(texts), _wordllama(texts), atol=1e-6
        )


def test_segment_pool_stays_exact_when_its_cache_fills() -> None:
    from app.llm.wordllama_pool import SegmentPool

    embedder = local_embedder()
    tokenizer = embedder._pool._tokenizer
    # 40 slots: most groups overflow it (the cache restarts) and the 3,000-char text has more
    # distinct segments than fit at all (the tokenizer's own path).
    pool = SegmentPool(tokenizer, embedder._model.embedding, capacity=40)
    texts = [*TRICKY, " ".join(f"word{n}" for n in range(100)), *TRICKY]
    ours = pool.pooled(texts)
    norms = np.linalg.norm(ours, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    np.testing.assert_allclose(ours / norms, _wordllama(texts), atol=1e-6)
