"""`GET /api/context/{projectPath}`, `GET /api/context?projectPath=` and `POST /api/context`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from app.api import paths  # noqa: F401 - registers the `{name:any}` paths below use
from app.api.bodies import StrictBody
from app.api.deps import DbDep, ProjectPathQuery, SettingsDep
from app.api.limits import PATH_MAX_CHARS
from app.api.numbers import BodyInt
from app.context.builder import ContextBlock, build_context
from app.errors import BadRequest, ValidationFailed
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


# Where a project path came from, as a validation error names it (a body's field goes bare).
PATH_FORM, QUERY_FORM, BODY_FORM = "path.projectPath", "query.projectPath", "projectPath"
SNAKE_QUERY_FORM = "query.project_path"


def _query_form(request: Request) -> str:
    """The spelling the query's project path came in, as its error names it: a key past the
    bound named `query.projectPath` when the client sent `?project_path=`, whose own bound
    (`ProjectPathQuery`) names it as sent."""
    sent_camel = any(value.strip() for value in request.query_params.getlist("projectPath"))
    return QUERY_FORM if sent_camel else SNAKE_QUERY_FORM


def _too_long(where: str) -> ValidationFailed:
    return ValidationFailed(f"{where}: String should have at most {PATH_MAX_CHARS} characters")


def normalise_project_path(from_path: str | None, given: str | None, given_in: str) -> str:
    """`given` (`?projectPath=`, or the body's, as `given_in` says) wins, keyed as every other
    route keys it; a path in the URL's path, which lost its leading slash, gets it back."""
    # The query's and the body's value are bounded as sent by their own field; the path's is
    # bounded here alike, before `/./` folds it: 6,000 characters of `a/./` passed as a path.
    if from_path is not None and len(from_path) > PATH_MAX_CHARS:
        raise _too_long(PATH_FORM)
    # NULs are cleaned before storage, so a stored project path never holds one.
    given = clean_text(given) if given is not None else None
    from_path = clean_text(from_path) if from_path is not None else None
    by_path = not (given and given.strip())
    chosen, where = (from_path, PATH_FORM) if by_path else (given, given_in)
    if chosen is None or not chosen.strip():
        raise MissingProjectPath("give the project as /api/context/<path> or ?projectPath=")
    chosen = chosen.strip()
    # Only the path form lost a slash (the URL's own): a query's or a body's `~/shop` or `shop`
    # is the key a memory or a session sent so is stored under, and read as `/~/shop` the
    # context was always empty. `~` starts no absolute path, so `/api/context/~/shop` is the
    # client's `~/shop` too. A Windows path after slashes (`/api/context//C:/Users/...`) is
    # folded by canonical_project, in every form and every route alike.
    if by_path and not chosen.startswith(("/", "~")) and not is_windows_path(chosen):
        chosen = "/" + chosen
    project = canonical_project(chosen)
    # Bounded as every path field is, on the key: a relative path of 4,096 characters is one
    # over once the path form gives its slash back, and the search under the block refused it
    # (a 500).
    if len(project) > PATH_MAX_CHARS:
        raise _too_long(where)
    return project


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


PROMPT_MAX_CHARS = 20_000
BUDGET_MIN, BUDGET_MAX = 50, 100_000
PromptQuery = Annotated[str | None, Query(max_length=PROMPT_MAX_CHARS)]
BudgetQuery = Annotated[int | None, Query(ge=BUDGET_MIN, le=BUDGET_MAX)]
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
    request: Request,
    db: DbDep,
    settings: SettingsDep,
    project_path: ProjectPathQuery,
    prompt: PromptQuery = None,
    budget: BudgetQuery = None,
    output: FormatQuery = "markdown",
) -> PlainTextResponse | ContextOut:
    project = normalise_project_path(None, project_path, _query_form(request))
    return await _context(db, settings, project, prompt, budget, output)


@router.get("/context/{path_project:any}", response_model=None)
async def get_context(
    request: Request,
    path_project: str,
    db: DbDep,
    settings: SettingsDep,
    project_path: ProjectPathQuery,
    prompt: PromptQuery = None,
    budget: BudgetQuery = None,
    output: FormatQuery = "markdown",
) -> PlainTextResponse | ContextOut:
    project = normalise_project_path(path_project, project_path, _query_form(request))
    return await _context(db, settings, project, prompt, budget, output)


class ContextRequest(StrictBody):
    """`POST /api/context`: the GET's parameters in a body, for a prompt too long for a URL.

    The server reads at most 64 KiB of request line and headers (past that, uvicorn's plain-text
    400 "Invalid HTTP request received."): a prompt of 8,000 CJK characters, 72 KB
    percent-encoded, was within the GET's 20,000 characters and could not be sent."""

    project_path: str = Field(max_length=4096)
    prompt: str | None = Field(default=None, max_length=PROMPT_MAX_CHARS)
    budget: BodyInt | None = Field(default=None, ge=BUDGET_MIN, le=BUDGET_MAX)
    format: Literal["markdown", "json"] = "markdown"


@router.post("/context", response_model=None)
async def post_context(
    body: ContextRequest, db: DbDep, settings: SettingsDep
) -> PlainTextResponse | ContextOut:
    project = normalise_project_path(None, body.project_path, BODY_FORM)
    return await _context(db, settings, project, body.prompt, body.budget, body.format)
