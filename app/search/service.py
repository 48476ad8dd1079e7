"""Search service: validate the query, embed it, run the one search statement, shape results."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.errors import BadRequest, first_line
from app.index.embedding import vector_literal
from app.llm.embeddings import Embedder, LocalEmbedder
from app.search import queries
from app.search.fusion import RRF_K, candidate_count
from app.search.schemas import SearchRequest, SearchResponse, SearchResult
from app.search.term_stats import TERM_STATS

log = structlog.get_logger(__name__)


class EmptySearchQuery(BadRequest):
    """The query has no characters to search for."""


class InvalidSearchFilter(BadRequest):
    """A filter can never match (for example `since` after `until`)."""


@dataclass(frozen=True, slots=True)
class SearchTuning:
    """Knobs of the search; defaults match the settings' defaults."""

    min_candidates: int = 40
    rrf_k: float = RRF_K
    vector_weight: float = 1.0
    keyword_weight: float = 1.0
    vector_floor: float = 0.0
    keyword_floor: float = 0.0
    rank_normalization: int = 5  # ts_rank_cd's length normalisation bits
    prefix_last: bool = True  # the last query word also matches as a prefix
    exact_weight: float = 1.0  # hybrid: boost for rows holding the query's exact phrases
    # hybrid: a keyword rank counts in full when the row holds every query word, at this share
    # when it holds two or more (pair tier) or one (single-word tier)
    tier_weights: tuple[float, float] = (0.5, 0.1)
    rank_function: queries.RankFunction = "idf"
    rarity: bool = True  # leave common words out of the pair and single-word tiers' scans
    # Rows below this cosine similarity that hold fewer than two query words are dropped (None:
    # kept). Searches rank what there is; the context builder must be able to add nothing.
    min_similarity: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> SearchTuning:
        return cls(
            min_candidates=settings.search_min_candidates,
            rrf_k=settings.search_rrf_k,
            vector_weight=settings.search_vector_weight,
            keyword_weight=settings.search_keyword_weight,
            vector_floor=settings.search_vector_floor,
            keyword_floor=settings.search_keyword_floor,
            rank_normalization=settings.search_rank_normalization,
            exact_weight=settings.search_exact_weight,
            tier_weights=(settings.search_pair_tier_weight, settings.search_single_tier_weight),
            rank_function=settings.search_rank_function,
        )


# ts_headline marks matches with this; the text's own `**` is removed before highlighting.
HIGHLIGHT = "**"


def snippet(headline: str, content: str) -> str:
    """`headline` when it shows a match, else the opening of `content`, without its own `**`
    (in a snippet they mark matching words).

    Without a match in the text, ts_headline returns the text's first MinWords (8) words: a
    row found by its vector alone, or by an identifier's parts or its section titles (in its
    `search_terms`, not its text), got ~50 characters such as `export function
    validateToken(raw: string) { return verify`."""
    if HIGHLIGHT in headline:
        return headline
    return content.replace(HIGHLIGHT, "")[: queries.SNIPPET_CHARS]


def query_vector(embedder: Embedder, query: str) -> str | None:
    """The query's vector as a pgvector literal, or None when it is a zero vector."""
    vector = embedder.embed_query(query)
    if not np.isfinite(vector).all() or float(np.linalg.norm(vector)) < 1e-6:
        return None
    return vector_literal(vector)


@dataclass(frozen=True, slots=True)
class QueryEmbedding:
    """A search query's vector as a pgvector literal (None: a keyword search, a zero vector,
    or a hybrid one whose query could not be embedded), and why a hybrid search has none."""

    vector: str | None
    degraded: str | None = None


def _query_text(request: SearchRequest) -> str:
    query = request.query.strip()
    if not query:
        raise EmptySearchQuery("query is empty; send the words to search for")
    return query


async def embed_search_query(embedder: Embedder, request: SearchRequest) -> QueryEmbedding:
    """The embedding `search` makes of `request`'s query, for a caller that searches one query
    more than once: a remote embedder bills each call and caches none.

    Only the local model runs on the event loop (well under a millisecond); a remote or heavy
    one runs in a thread: a Gemini call held every request of the API for its round trip, and
    for ~20 s of retries while Gemini answered 503. A hybrid search whose query cannot be
    embedded ranks by keywords alone; a vector search has nothing to rank by and fails.
    """
    query = _query_text(request)
    if request.mode == "keyword":
        return QueryEmbedding(None)
    try:
        if isinstance(embedder, LocalEmbedder):
            return QueryEmbedding(query_vector(embedder, query))
        return QueryEmbedding(await asyncio.to_thread(query_vector, embedder, query))
    except Exception as error:
        if request.mode == "vector":
            raise
        reason = f"keyword ranking only: the query could not be embedded ({first_line(error)})"
        log.warning("search.vector_unavailable", error=first_line(error)[:300])
        return QueryEmbedding(None, reason)


async def search(
    session: AsyncSession,
    *,
    request: SearchRequest,
    embedder: Embedder,
    tuning: SearchTuning | None = None,
    snippets: bool = True,
    embedding: QueryEmbedding | None = None,
) -> SearchResponse:
    """Rank index rows for `request.query` by the requested mode (hybrid RRF by default).

    `snippets=False` leaves every `snippet` empty, for callers that read only `content`;
    `embedding`, from `embed_search_query` of the same query and mode, saves embedding it
    again."""
    started = time.perf_counter()
    tuning = tuning or SearchTuning()
    query = _query_text(request)
    if request.since and request.until and request.since >= request.until:
        raise InvalidSearchFilter("since must be earlier than until")
    if request.sources is not None and not request.sources:
        raise InvalidSearchFilter(
            "sources is empty: name at least one source, or leave it out for every source"
        )
    filters = queries.SearchFilters(
        project_path=request.project_path,
        sources=tuple(request.sources) if request.sources is not None else None,
        path_prefix=request.path_prefix,
        since=request.since,
        until=request.until,
    )
    terms = queries.keyword_terms(query)
    embedding = embedding or await embed_search_query(embedder, request)
    shares = (
        await TERM_STATS.shares(session, queries.content_terms(terms))
        if request.mode != "vector" and tuning.rarity
        else {}
    )
    idf: dict[str, float] = {}
    if request.mode != "vector" and tuning.rank_function == "idf":
        operands = queries.idf_operands(terms, prefix_last=tuning.prefix_last)
        weights = await TERM_STATS.idf(session, list(operands))
        idf = {operands[term]: queries.idf_weight(term, weight) for term, weight in weights.items()}
    rows = await queries.run_search(
        session,
        mode=request.mode,
        model=embedder.identity,
        dims=embedder.dims,
        filters=filters,
        query_vector=embedding.vector,
        tsq=queries.tsquery_text(terms, prefix_last=tuning.prefix_last),
        # No prefix in the pair tier: expanding `'order':*` over every lexeme sharing it (each
        # identifier such as `order123`) in 28 pairs doubled that GIN scan's cost at 100k rows. A
        # row matching the prefix still ranks in the all-words or single-word tier.
        tsq_strict=queries.strict_tsquery_text(terms, prefix_last=False, shares=shares),
        tsq_all=queries.all_tsquery_text(terms, prefix_last=tuning.prefix_last),
        tsq_loose=queries.loose_tsquery_text(terms, prefix_last=tuning.prefix_last, shares=shares),
        limit=request.limit,
        candidates=candidate_count(request.limit, tuning.min_candidates),
        min_score=request.min_score if request.min_score is not None else float("-inf"),
        vector_floor=tuning.vector_floor,
        keyword_floor=tuning.keyword_floor,
        rrf_k=tuning.rrf_k,
        vector_weight=tuning.vector_weight,
        keyword_weight=tuning.keyword_weight,
        rank_normalization=tuning.rank_normalization,
        snippets=snippets,
        phrases=queries.exact_phrases(query),
        exact_weight=tuning.exact_weight,
        tier_weights=tuning.tier_weights,
        rank_function=tuning.rank_function,
        idf=idf,
        min_similarity=tuning.min_similarity,
        rank_scale=queries.or_rank_scale(terms),
    )
    results = [
        SearchResult(
            id=row.id,
            source=row.source,
            score=float(row.score),
            vector_rank=row.vector_rank,
            keyword_rank=row.keyword_rank,
            vector_score=row.vector_score,
            keyword_score=row.keyword_score,
            content=row.content,
            snippet=snippet(row.snippet, row.content) if snippets else "",
            path=row.path,
            start_line=row.start_line,
            end_line=row.end_line,
            session_id=row.session_id,
            observation_id=row.observation_id,
            created_at=row.created_at,
            key=row.memory_key,
        )
        for row in rows
    ]
    took_ms = round((time.perf_counter() - started) * 1000, 2)
    log.debug("search.done", mode=request.mode, results=len(results), took_ms=took_ms)
    return SearchResponse(results=results, took_ms=took_ms, degraded=embedding.degraded)
