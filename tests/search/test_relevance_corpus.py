"""The corpus-shaped relevance bench's own measures (bench/relevance_corpus.py)."""

from __future__ import annotations

import numpy as np

from bench.corpus.build import CorpusChunk
from bench.relevance_corpus import Trigrams, ridge_to_identity, trigrams


def test_trigrams_are_pg_trgms() -> None:
    # pg_trgm's show_trgm('Cat') is {"  c"," ca","at ","cat"}: lower-cased, two spaces before.
    assert trigrams("Cat") == {"  c", " ca", "cat", "at "}


def test_trigram_lists_rank_the_closer_spelling_first() -> None:
    chunks = [
        CorpusChunk("a", "observation", "the dev server restarted twice"),
        CorpusChunk("b", "observation", "nothing related here"),
        CorpusChunk("c", "observation", "a server restart"),
    ]
    grams = Trigrams([1, 2, 3], chunks)
    assert grams.per_word("restarts") == [3, 1]  # `restart` is nearer than `restarted`
    # The whole query's trigrams held anywhere: both rows hold `server` and 7 of 9 of `restarts`.
    assert grams.whole("server restarts") == [1, 3, 2]


def test_the_ridge_map_is_the_identity_when_held_hard_and_the_fit_when_free() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    wanted = rng.normal(size=(8, 8)).astype(np.float32)
    y = x @ wanted
    assert np.allclose(ridge_to_identity(x, y, 1e9), np.eye(8), atol=1e-3)
    assert np.allclose(ridge_to_identity(x, y, 1e-6), wanted, atol=1e-3)
