"""`GET /api/context/{projectPath}` and `GET /api/context?projectPath=`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from app.api import paths  # noqa: F401 - registers the `{name:any}` paths below use
from app.api.deps import DbDep, ProjectPathQuery, SettingsDep
from app.context.builder import ContextBlock, build_context
from app.errors import BadRequest
from app.llm.embeddings import get_embedder
from app.privacy import clean_text
from app.projects import canonical_project, is_windows_path
from app.search.service import SearchTuning

router = APIRouter(prefix="/api", tags=["context"])


class MissingProjectPath(BadRequest):
    """Neither the path nor `?projectPath=` names a project."""


class ContextItemOut(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    source: str
    content: str
    tokens: int
    path: str | None
    start_line: int | None
    end_line: int | None
    session_id: str | None
    observation_id: str | None
    created_at: datetime | None


class ContextOut(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    context: str
    token_count: int
    budget: int
    items: list[ContextItemOut]


def normalise_project_path(from_path: str | None, from_query: str | None) -> str:
    """`?projectPath=` wins; a path given without its leading slash gets it back."""
    # NULs are cleaned before storage, so a stored project path never holds one.
    from_query = clean_text(from_query) if from_query is not None else None
    from_path = clean_text(from_path) if from_path is not None else None
    chosen = from_query if from_query and from_query.strip() else from_path
    if chosen is None or not chosen.strip():
        raise MissingProjectPath("give the project as /api/context/<path> or ?projectPath=")
    chosen = chosen.strip()
    if chosen.startswith("/") or is_windows_path(chosen):
        return canonical_project(chosen)
    return canonical_project("/" + chosen)


def _shape(block: ContextBlock, output: str) -> PlainTextResponse | ContextOut:
    if output == "markdown":
        return PlainTextResponse(block.markdown, media_type="text/markdown; charset=utf-8")
    return ContextOut(
        context=block.markdown,
        token_count=block.token_count,
        budget=block.budget,
        items=[
            ContextItemOut(
                source=item.source,
                content=item.content,
                tokens=item.tokens,
                path=item.path,
                start_line=item.start_line,
                end_line=item.end_line,
                session_id=item.session_id,
                observation_id=item.observation_id,
                created_at=item.created_at,
            )
            for item in block.items
        ],
    )


PromptQuery = Annotated[str | None, Query(max_length=20_000)]
BudgetQuery = Annotated[int | None, Query(ge=50, le=100_000)]
FormatQuery = Annotated[Literal["markdown", "json"], Query(alias="format")]


async def _context(
    db: DbDep,
    settings: SettingsDep,
    project: str,
    prompt: str | None,
    budget: int | None,
    output: str,
) -> PlainTextResponse | ContextOut:
    block = await build_context(
        db,
        project_path=project,
        prompt=clean_text(prompt) if prompt is not None else None,
        budget=budget or settings.context_budget,
        embedder=get_embedder(settings),
        tuning=SearchTuning.from_settings(settings),
        max_sessions=settings.context_sessions,
        min_similarity=settings.context_min_similarity,
    )
    return _shape(block, output)


@router.get("/context", response_model=None)
async def get_context_by_query(
    db: DbDep,
    settings: SettingsDep,
    project_path: ProjectPathQuery,
    prompt: PromptQuery = None,
    budget: BudgetQuery = None,
    output: FormatQuery = "markdown",
) -> PlainTextResponse | ContextOut:
    project = normalise_project_path(None, project_path)
    return await _context(db, settings, project, prompt, budget, output)


@router.get("/context/{path_project:any}", response_model=None)
async def get_context(
    path_project: str,
    db: DbDep,
    settings: SettingsDep,
    project_path: ProjectPathQuery,
    prompt: PromptQuery = None,
    budget: BudgetQuery = None,
    output: FormatQuery = "markdown",
) -> PlainTextResponse | ContextOut:
    project = normalise_project_path(path_project, project_path)
    return await _context(db, settings, project, prompt, budget, output)
