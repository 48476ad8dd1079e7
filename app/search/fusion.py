"""Fusion rules. Postgres applies them inside the search statement (see `queries.py`); the same
rules in Python serve the SQLite peer in `bench/search.py` and the tests that check the SQL."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

RRF_K = 60.0
WEIGHTED_VECTOR = 0.7  # OpenClaw's merge: 0.7 vector similarity + 0.3 normalised text score
WEIGHTED_TEXT = 0.3
CANDIDATE_FACTOR = 4  # each branch contributes at least 4 x limit candidates


@dataclass(frozen=True, slots=True)
class FusionParams:
    rrf_k: float = RRF_K
    vector_weight: float = 1.0
    keyword_weight: float = 1.0


def candidate_count(limit: int, minimum: int) -> int:
    """How many rows each branch hands to the fusion."""
    return max(CANDIDATE_FACTOR * limit, minimum)


def rrf(
    vector_ranked: list[int], keyword_ranked: list[int], params: FusionParams = FusionParams()
) -> dict[int, float]:
    """Reciprocal rank fusion of two ranked id lists (rank 1 first): Σ w / (k + rank)."""
    scores: dict[int, float] = {}
    for rank, item in enumerate(vector_ranked, start=1):
        scores[item] = scores.get(item, 0.0) + params.vector_weight / (params.rrf_k + rank)
    for rank, item in enumerate(keyword_ranked, start=1):
        scores[item] = scores.get(item, 0.0) + params.keyword_weight / (params.rrf_k + rank)
    return scores


def weighted(
    vector_similarity: Mapping[int, float], text_score: Mapping[int, float]
) -> dict[int, float]:
    """0.7 x vector similarity + 0.3 x text score normalised by the best text score."""
    best = max(text_score.values(), default=0.0)
    scores: dict[int, float] = {}
    for item in set(vector_similarity) | set(text_score):
        text_part = text_score.get(item, 0.0) / best if best > 0 else 0.0
        scores[item] = (
            WEIGHTED_VECTOR * vector_similarity.get(item, 0.0) + WEIGHTED_TEXT * text_part
        )
    return scores


def top(scores: Mapping[int, float], limit: int) -> list[int]:
    """Ids by descending score, ties broken by id, as the SQL orders them."""
    return [item for item, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]
