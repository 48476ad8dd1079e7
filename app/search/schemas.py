"""Request and response shapes of `POST /api/search` (camelCase on the wire)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator

from app.api.bodies import CamelModel, StrictBody
from app.api.numbers import BodyFloat, BodyInt
from app.api.times import RequestTime
from app.privacy import clean_text
from app.projects import canonical_project

SearchMode = Literal["hybrid", "vector", "keyword", "weighted"]
SearchSource = Literal["memory", "sessions", "observation", "summary", "kv"]
MAX_QUERY_CHARS = 4000
MAX_LIMIT = 100


class SearchRequest(StrictBody):
    query: str = Field(max_length=MAX_QUERY_CHARS)
    project_path: str | None = Field(default=None, max_length=4096)
    limit: BodyInt = Field(default=10, ge=1, le=MAX_LIMIT)
    mode: SearchMode = "hybrid"
    sources: list[SearchSource] | None = Field(default=None, max_length=5)
    min_score: BodyFloat | None = Field(default=None, allow_inf_nan=False)
    # Filters beyond the contract's minimum; both branches apply them identically.
    path_prefix: str | None = Field(default=None, max_length=4096)
    since: RequestTime | None = None
    until: RequestTime | None = None

    @field_validator("query", "project_path", "path_prefix", mode="before")
    @classmethod
    def _clean(cls, value: object) -> object:
        # Cleaned as stored text is: a NUL can never match it (and Postgres refuses one), and a
        # lone surrogate, which pydantic's string check refuses, becomes U+FFFD as it does there.
        return clean_text(value) if isinstance(value, str) else value

    @field_validator("project_path")
    @classmethod
    def _canonical(cls, value: str | None) -> str | None:
        # Blank is no filter, as an omitted projectPath is (it matched no project at all).
        return canonical_project(value) or None if value is not None else None


class SearchResult(CamelModel):
    id: int
    source: str
    score: float
    vector_rank: int | None
    keyword_rank: int | None
    vector_score: float | None
    keyword_score: float | None
    content: str
    snippet: str
    path: str | None
    start_line: int | None
    end_line: int | None
    session_id: str | None
    observation_id: str | None
    created_at: datetime
    # A kv row's memory key, its citation (`kv:<key>`); the key is also the start of `content`,
    # but a key may hold `: ` itself. Internal: the contract's result fields are unchanged.
    key: str | None = Field(default=None, exclude=True)


class SearchResponse(CamelModel):
    results: list[SearchResult]
    took_ms: float
    # Set when a hybrid search ranked by keywords alone (the query could not be embedded).
    degraded: str | None = None
