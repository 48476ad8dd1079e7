"""The relevance set's dev/test split (bench/corpus/split.py): fixed, stratified, disjoint."""

from __future__ import annotations

from collections import Counter

from bench.corpus.queries import QUERIES
from bench.corpus.split import split


def test_every_kind_is_split_in_half() -> None:
    halves = split(QUERIES)
    counts = Counter(zip((kind for kind, _, _ in QUERIES), halves, strict=True))
    for kind in {kind for kind, _, _ in QUERIES}:
        assert abs(counts[kind, "dev"] - counts[kind, "test"]) <= 1, kind


def test_a_query_keeps_its_half_whatever_the_order_or_other_queries() -> None:
    halves = dict(zip((query for _, query, _ in QUERIES), split(QUERIES), strict=True))
    reversed_halves = split(QUERIES[::-1])
    assert dict(zip((q for _, q, _ in QUERIES[::-1]), reversed_halves, strict=True)) == halves
    # Dropping one query of a kind moves at most the queries of that kind after it.
    others = [q for q in QUERIES if q[0] != "ident"]
    assert {q: h for (_, q, _), h in zip(others, split(others), strict=True)} == {
        q: halves[q] for _, q, _ in others
    }


def test_the_split_is_the_recorded_one() -> None:
    # docs/benchmarks.md reports figures for exactly these halves.
    halves = split(QUERIES)
    assert (halves.count("dev"), halves.count("test")) == (81, 79)
    assert halves[:8] == ["dev", "dev", "dev", "dev", "dev", "dev", "test", "dev"]


def test_the_gap_interval_brackets_the_gap() -> None:
    from bench.relevance import gap_interval

    everyone = [True] * 40
    assert gap_interval([1] * 40, [1] * 40, everyone) == (0.0, 0.0)
    assert gap_interval([1] * 40, [None] * 40, everyone) == (1.0, 1.0)
    # Hybrid finds 4 more of 40: the interval holds the observed +0.1 and is wider than zero.
    low, high = gap_interval([1] * 40, [None] * 4 + [1] * 36, everyone)
    assert low <= 0.1 <= high
    assert low < high
    # Only member queries count.
    assert gap_interval([1, None], [None, None], [False, True]) == (0.0, 0.0)
