"""`POST /api/search`."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import DbDep, SettingsDep
from app.llm.embeddings import get_embedder
from app.search.schemas import SearchRequest, SearchResponse
from app.search.service import SearchTuning, search

router = APIRouter(prefix="/api", tags=["search"])


@router.post("/search", response_model=SearchResponse, response_model_by_alias=True)
async def post_search(body: SearchRequest, db: DbDep, settings: SettingsDep) -> SearchResponse:
    return await search(
        db,
        request=body,
        embedder=get_embedder(settings),
        tuning=SearchTuning.from_settings(settings),
    )
