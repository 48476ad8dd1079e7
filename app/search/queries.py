"""All search SQL: the keyword and vector branches and their fusion, as one statement.

The statement is assembled from fixed parts (which branches run, which filters are present) and
every value is a bound parameter, except the model identity and width: a partial expression HNSW
index (`(embedding::vector(D)) ... WHERE model = '<identity>'`) is only usable when the query
repeats the cast and the predicate literally, which a generic plan over a bound parameter cannot
prove. Both come from our own settings, never from a request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.search.fusion import WEIGHTED_TEXT, WEIGHTED_VECTOR
from app.search.schemas import SearchMode

MAX_TERMS = 24
PREFIX_MIN_CHARS = 3  # a prefix of one or two letters matches half the corpus and ranks nothing
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD = re.compile(r"[^\W_]+")


def keyword_terms(query: str) -> list[str]:
    """The query's words as the index sees them: camelCase split, every non-alphanumeric run a
    separator, lower-cased, de-duplicated in order. Nothing else of the user's text survives."""
    words = _WORD.findall(_CAMEL.sub(r"\1 \2", query))
    seen: dict[str, None] = {}
    for word in words:
        seen.setdefault(word.lower(), None)
    return list(seen)[:MAX_TERMS]


def tsquery_text(terms: list[str], *, prefix_last: bool = True) -> str:
    """An OR of the terms for `to_tsquery('english', ...)`; the last term also matches as a prefix.

    Terms are alphanumeric only (see `keyword_terms`), so quoting them cannot be escaped from."""
    parts = [f"'{term}'" for term in terms]
    if prefix_last and parts and len(terms[-1]) >= PREFIX_MIN_CHARS:
        parts[-1] = f"'{terms[-1]}':*"
    return " | ".join(parts)


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Filters applied identically to both branches."""

    project_path: str | None = None
    sources: tuple[str, ...] | None = None
    path_prefix: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def shape(self) -> tuple[bool, ...]:
        return (
            self.project_path is not None,
            self.sources is not None,
            self.path_prefix is not None,
            self.since is not None,
            self.until is not None,
        )

    def params(self) -> dict[str, Any]:
        prefix = None
        if self.path_prefix is not None:
            prefix = re.sub(r"([\\%_])", r"\\\1", self.path_prefix) + "%"
        return {
            "f_project": self.project_path,
            "f_sources": list(self.sources) if self.sources is not None else None,
            "f_path_prefix": prefix,
            "f_since": self.since,
            "f_until": self.until,
        }


def _filter_sql(shape: tuple[bool, ...]) -> str:
    project, sources, path_prefix, since, until = shape
    clauses = []
    if project:
        clauses.append("c.project_path = :f_project")
    if sources:
        clauses.append("c.source = ANY(CAST(:f_sources AS text[]))")
    if path_prefix:
        clauses.append("c.file_path LIKE :f_path_prefix ESCAPE '\\'")
    if since:
        clauses.append("c.created_at >= :f_since")
    if until:
        clauses.append("c.created_at < :f_until")
    return "".join(f" AND {clause}" for clause in clauses)


def _vector_cte(model: str, dims: int, filters: str) -> str:
    literal = model.replace("'", "''")
    distance = f"(c.embedding::vector({dims}) <=> CAST(:qvec AS vector({dims})))"
    # relaxed_order lets the index return rows slightly out of order; rank after re-sorting.
    return f"""
vec_raw AS MATERIALIZED (
  SELECT c.id, {distance} AS distance
  FROM memory_chunks c
  WHERE c.model = '{literal}'{filters}
  ORDER BY {distance}
  LIMIT :candidates
),
vec AS (
  SELECT id, 1 - distance AS similarity, row_number() OVER (ORDER BY distance, id) AS rank
  FROM vec_raw WHERE 1 - distance >= :vector_floor
)"""


def _keyword_cte(filters: str) -> str:
    return f"""
kw_raw AS MATERIALIZED (
  SELECT c.id, ts_rank_cd(c.tsv, q.query) AS rank_score
  FROM memory_chunks c, (SELECT to_tsquery('english', :tsq) AS query) q
  WHERE c.tsv @@ q.query{filters}
  ORDER BY rank_score DESC, c.id
  LIMIT :candidates
),
kw AS (
  SELECT id, rank_score, row_number() OVER (ORDER BY rank_score DESC, id) AS rank,
         rank_score / NULLIF(max(rank_score) OVER (), 0) AS normalised
  FROM kw_raw WHERE rank_score >= :keyword_floor
)"""


_EMPTY_VEC = (
    "vec AS (SELECT NULL::bigint AS id, NULL::float8 AS similarity, NULL::bigint AS rank "
    "WHERE false)"
)
_EMPTY_KW = (
    "kw AS (SELECT NULL::bigint AS id, NULL::float8 AS rank_score, NULL::bigint AS rank, "
    "NULL::float8 AS normalised WHERE false)"
)

_SCORES: dict[str, str] = {
    "hybrid": (
        "COALESCE(:w_vector / (:rrf_k + v.rank), 0) + COALESCE(:w_keyword / (:rrf_k + k.rank), 0)"
    ),
    "weighted": (
        f"{WEIGHTED_VECTOR} * COALESCE(v.similarity, 0) + "
        f"{WEIGHTED_TEXT} * COALESCE(k.normalised, 0)"
    ),
    "vector": "v.similarity",
    "keyword": "k.rank_score",
}


@lru_cache(maxsize=256)
def search_statement(
    mode: SearchMode,
    model: str,
    dims: int,
    shape: tuple[bool, ...],
    use_vector: bool,
    use_keyword: bool,
) -> TextClause:
    """The whole search as one statement: the branches asked for, the fusion, the final rows.

    `use_keyword` also decides the snippet: with query terms it highlights them."""
    filters = _filter_sql(shape)
    ctes = [
        _vector_cte(model, dims, filters) if use_vector and mode != "keyword" else _EMPTY_VEC,
        _keyword_cte(filters) if use_keyword and mode != "vector" else _EMPTY_KW,
    ]
    snippet = (
        "ts_headline('english', c.content, to_tsquery('english', :tsq), "
        '\'MaxFragments=2, MaxWords=24, MinWords=8, FragmentDelimiter=" … ", '
        "StartSel=**, StopSel=**')"
        if use_keyword
        else "left(c.content, 300)"
    )
    sql = f"""
WITH {",".join(ctes)},
fused AS (
  SELECT COALESCE(v.id, k.id) AS id, v.rank AS vector_rank, v.similarity AS vector_score,
         k.rank AS keyword_rank, k.rank_score AS keyword_score, {_SCORES[mode]} AS score
  FROM vec v FULL OUTER JOIN kw k ON v.id = k.id
),
top AS (
  SELECT * FROM fused WHERE score IS NOT NULL AND score >= :min_score
  ORDER BY score DESC, id LIMIT :limit
)
SELECT t.id, t.score, t.vector_rank, t.vector_score, t.keyword_rank, t.keyword_score,
       c.source, c.content, {snippet} AS snippet, c.file_path AS path, c.start_line,
       c.end_line, c.session_id, c.observation_id, c.created_at
FROM top t JOIN memory_chunks c ON c.id = t.id
ORDER BY t.score DESC, t.id"""
    return text(sql)


_SCAN_SETTINGS = text(
    "SELECT set_config('hnsw.ef_search', :ef_search, true), "
    "set_config('hnsw.iterative_scan', 'relaxed_order', true)"
)


async def configure_vector_scan(session: AsyncSession, *, candidates: int) -> None:
    """Filtered HNSW returns too few rows unless the scan may iterate and its list is wide."""
    ef_search = max(40, min(candidates, 1000))
    await session.execute(_SCAN_SETTINGS, {"ef_search": str(ef_search)})


async def run_search(
    session: AsyncSession,
    *,
    mode: SearchMode,
    model: str,
    dims: int,
    filters: SearchFilters,
    query_vector: str | None,
    tsq: str,
    limit: int,
    candidates: int,
    min_score: float,
    vector_floor: float,
    keyword_floor: float,
    rrf_k: float,
    vector_weight: float,
    keyword_weight: float,
) -> list[Any]:
    """Run one search; rows carry both branch ranks and scores and the fused score."""
    use_vector = query_vector is not None and mode != "keyword"
    use_keyword = bool(tsq)
    if not use_vector and not (use_keyword and mode != "vector"):
        return []
    if use_vector:
        await configure_vector_scan(session, candidates=candidates)
    statement = search_statement(mode, model, dims, filters.shape(), use_vector, use_keyword)
    params: dict[str, Any] = {
        **filters.params(),
        "qvec": query_vector,
        "tsq": tsq,
        "limit": limit,
        "candidates": candidates,
        "min_score": min_score,
        "vector_floor": vector_floor,
        "keyword_floor": keyword_floor,
        "rrf_k": rrf_k,
        "w_vector": vector_weight,
        "w_keyword": keyword_weight,
    }
    result = await session.execute(statement, params)
    return list(result.all())
