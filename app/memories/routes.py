"""HTTP routes of key/value memories and smart resume: parse, call the service, shape."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from app import exactjson
from app.api import paths  # noqa: F401 - registers the `{name:any}` paths below use
from app.api.deps import DbDep, SettingsDep, StateDep, two_spellings_query
from app.api.limits import PATH_MAX_CHARS
from app.api.responses import ExactJSONResponse
from app.api.spellings import meaning
from app.db.engine import transaction
from app.errors import BadRequest, ValidationFailed
from app.memories import resume as resume_service
from app.memories import service
from app.memories.paging import Cursor
from app.memories.patterns import is_pattern
from app.memories.reads import flush_reads, memory_reads_lifespan, read_memory
from app.memories.schemas import (
    MAX_KEY_LENGTH,
    SESSION_ID_MAX_CHARS,
    Deleted,
    Memory,
    MemoryList,
    MemoryVersion,
    MemoryWithHistory,
    MemoryWrite,
    Resume,
    ResumeRequest,
    Scope,
    check_key,
    tag_filter,
)
from app.state import AppState

router = APIRouter(prefix="/api", tags=["memories"], lifespan=memory_reads_lifespan)


class InvalidIfMatch(BadRequest):
    pass


def _text(snake_name: str, value: str | None) -> str | None:
    """A query's text as the spelling rule reads it: cleaned, trimmed, None when blank, a project
    folded as the stored project is."""
    text: str | None = meaning(snake_name, value)
    return text


# Bounded as the PUT body's fields are, each value sent (unbounded, any length was cleaned,
# folded and looked up); not shown in the schema, which stays as clients generated it.
ProjectQuery = Annotated[
    str | None,
    two_spellings_query(
        "projectPath", "project_path", max_length=PATH_MAX_CHARS, bounds_in_schema=False
    ),
]
SessionQuery = Annotated[
    str | None,
    two_spellings_query(
        "sessionId", "session_id", max_length=SESSION_ID_MAX_CHARS, bounds_in_schema=False
    ),
]


# `async def` although it does not await: FastAPI runs a plain `def` dependency in a worker
# thread, and that hand-off cost more CPU than anything else in the exact-key read's route.
async def visibility(
    scope: Scope | None = None, project: ProjectQuery = None, session: SessionQuery = None
) -> service.Visibility:
    """Who reads: `?scope=&projectPath=&sessionId=` (snake_case accepted too, not two values)."""
    return service.Visibility(
        scope=scope,
        project_path=_text("project_path", project),
        session_id=_text("session_id", session),
    )


VisibilityDep = Annotated[service.Visibility, Depends(visibility)]


def _key(key: str) -> str:
    try:
        return check_key(key)
    except ValueError as error:
        raise service.InvalidKey(str(error)) from None


# One entity tag of an If-Match list: `"3"`, `W/"3"` (weak), or a bare `3` as clients send it.
_ENTITY_TAG = re.compile(r'(W/)?"([^"]*)"|([^",\s]+)')


def parse_if_match(header: str | None) -> service.Expected | None:
    """`If-Match: "3"` (or 3) names the version a write expects; `If-Match: *` (HTTP: "only if
    a current version exists") is `service.ANY_VERSION`; a list (`"3", "4"`) any of them.
    A weak tag (`W/"3"`) matches no version: If-Match compares strongly (RFC 9110 13.1.1),
    and it was read as `"3"`, so a write went through on a weak validator."""
    if header is None:
        return None
    if header.strip() == "*":
        return service.ANY_VERSION
    strong: list[int] = []
    items = [item for item in header.split(",") if item.strip()]  # a list may hold empty ones
    if not items:
        raise InvalidIfMatch(f'If-Match must be a memory version such as "3", not {header!r}')
    for item in items:
        tag = _ENTITY_TAG.fullmatch(item.strip())
        if tag is None:
            raise InvalidIfMatch(
                f'If-Match must be memory versions such as "3" or "3", "4", or *, not {header!r}'
            )
        version = _version(tag.group(2) if tag.group(3) is None else tag.group(3), header)
        if tag.group(1) is None:
            strong.append(version)
    if len(strong) == 1 and "," not in header:
        return strong[0]
    return frozenset(strong)


def _version(text: str, header: str) -> int:
    # isdigit() also says yes to a superscript two, which int() refuses, as it refuses more than
    # 4300 digits: both were a 500.
    if not (text.isascii() and text.isdigit()):
        raise InvalidIfMatch(f'If-Match must be a memory version such as "3", not {header!r}')
    try:
        return int(text)
    except ValueError:
        detail = f"If-Match names a version of {len(text)} digits; no memory has one"
        raise InvalidIfMatch(detail) from None


def _expected_version(if_match: str | None, if_version: int | None) -> service.Expected | None:
    """The one precondition of a write, from the header and the body (400 if they disagree)."""
    expected = parse_if_match(if_match)
    if expected is None or if_version is None or expected == if_version:
        return if_version if expected is None else expected
    if expected == service.ANY_VERSION and if_version > 0:
        return if_version  # "it exists, at version N" is the narrower of the two
    if isinstance(expected, frozenset) and if_version in expected:
        return if_version  # one of the listed versions: the body's narrows the header's
    raise InvalidIfMatch(f"If-Match ({if_match}) and ifVersion ({if_version}) disagree; send one")


def _etag(memory: Memory) -> dict[str, str]:
    return {"ETag": f'"{memory.version}"'}


@router.put(
    "/memories/{key:any}",
    response_model=Memory,
    responses={201: {"model": Memory, "description": "Created"}},  # 200 is an update
)
async def put_memory(
    key: str,
    body: MemoryWrite,
    db: DbDep,
    settings: SettingsDep,
    response: Response,
    request: Request,
    if_match: Annotated[str | None, Header()] = None,
) -> Memory:
    """Write a memory; an existing key is updated and its previous value kept as a version."""
    body = await _numbers_as_written(request, body)
    row, created = await service.write_memory(
        db,
        key=_key(key),
        data=body,
        settings=settings,
        if_version=_expected_version(if_match, body.if_version),
    )
    memory = service.to_schema(row)
    response.status_code = 201 if created else 200
    response.headers.update(_etag(memory))
    return memory


async def _numbers_as_written(request: Request, body: MemoryWrite) -> MemoryWrite:
    """The body again, from its JSON read by `exactjson` when its value holds a non-integer
    number: FastAPI's `json` made floats of them, and `1e-400` was stored as 0.0, `1.50` as
    1.5 and `1e-999999` (which the database cannot keep: 400) as 0.0, where `agmem memory set`
    keeps or refuses them. A value without one (most) is taken as parsed."""
    if not exactjson.has_float(body.value):
        return body
    try:
        return MemoryWrite.model_validate(exactjson.loads(await request.body()))
    except ValidationError as error:
        raise RequestValidationError(error.errors()) from None


# A page's `nextCursor`: a key of 500 characters, each escaped in JSON, fits well within.
CursorQuery = Annotated[str | None, Query(min_length=1, max_length=8192)]


@router.get("/memories", response_model=MemoryList)
async def list_memories(
    db: DbDep,
    state: StateDep,
    seen_by: VisibilityDep,
    pattern: Annotated[str | None, Query(max_length=MAX_KEY_LENGTH)] = None,
    tags: Annotated[list[str] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LIST_LIMIT)] = service.DEFAULT_LIST_LIMIT,
    cursor: CursorQuery = None,
) -> MemoryList:
    """Visible memories, filtered by a `*` pattern and by tags (all of them), sorted by key;
    `cursor` (a page's `nextCursor`) gives the next page."""
    wanted = _tags(tags)
    after = Cursor.decode(cursor) if cursor is not None else None
    await flush_reads(state)
    page = await service.find_memory_page(
        db,
        visibility=seen_by,
        pattern=_text("pattern", pattern),
        tags=wanted,
        limit=limit,
        after=after,
    )
    return _listing(page)


def _listing(page: service.MemoryPage) -> MemoryList:
    return MemoryList(
        memories=[service.to_schema(row) for row in page.rows],
        has_more=page.next_cursor is not None,
        next_cursor=page.next_cursor.encode() if page.next_cursor is not None else None,
    )


def _tags(tags: list[str] | None) -> list[str] | None:
    """`?tags=a,b` and `?tags=a&tags=b` both mean "tagged a and b"."""
    if not tags:
        return None
    split = [part for item in tags for part in item.split(",") if part.strip()]
    try:
        return tag_filter(split)
    except ValueError as error:
        raise ValidationFailed(f"tags: {error}") from None


@router.get("/memories/{key:any}", response_model=MemoryWithHistory | Memory | MemoryList)
async def get_memory(
    key: str,
    request: Request,
    seen_by: VisibilityDep,
    history: bool = False,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LIST_LIMIT)] = service.DEFAULT_LIST_LIMIT,
    cursor: CursorQuery = None,
) -> JSONResponse | MemoryList:
    """One memory by exact key, or `{memories}` when the key holds `*` wildcards (paged as the
    list is); 404 if none."""
    # No session dependency: the exact-key read, the hot path, runs on the reads' own pool, and
    # only patterns and history open a transaction.
    state: AppState = request.app.state.agmem
    if is_pattern(key):
        after = Cursor.decode(cursor) if cursor is not None else None
        await flush_reads(state)
        async with transaction(state.sessionmaker) as db:
            page = await service.find_memory_page(
                db, visibility=seen_by, pattern=key, limit=limit, after=after
            )
        # A page past the last match is empty, not "no match": the cursor says some matched.
        if not page.rows and after is None:
            raise service.MemoryNotFound(f"no visible memory matches {key!r}")
        return _listing(page)
    row = await read_memory(state, key=_key(key), visibility=seen_by)
    memory = service.to_schema(row)
    if history:
        async with transaction(state.sessionmaker) as db:
            versions = await service.memory_history(db, memory_id=row.id)
        memory = MemoryWithHistory(
            **memory.model_dump(),
            history=[
                MemoryVersion(
                    version=v.version,
                    value=v.value,
                    written_by=v.written_by,
                    written_at=v.written_at,
                )
                for v in versions
            ],
        )
    return ExactJSONResponse(memory.model_dump(mode="json", by_alias=True), headers=_etag(memory))


@router.delete("/memories/{key:any}", response_model=Deleted)
async def delete_memory(
    key: str,
    db: DbDep,
    seen_by: VisibilityDep,
    if_match: Annotated[str | None, Header()] = None,
) -> Deleted:
    """Delete the memory a read of this key would return; `{deleted: false}` when none. With
    `If-Match: "<version>"`, only if it is at that version (409 `VersionConflict` otherwise);
    `If-Match: *` deletes whatever version exists."""
    deleted = await service.delete_memory(
        db, key=_key(key), visibility=seen_by, if_version=parse_if_match(if_match)
    )
    return Deleted(deleted=deleted)


@router.post("/resume", response_model=Resume)
async def post_resume(
    db: DbDep, state: StateDep, body: Annotated[ResumeRequest | None, Body()] = None
) -> Resume:
    """A short briefing plus the project/current/shared memories, within a token budget."""
    body = body or ResumeRequest()
    await flush_reads(state)
    return await resume_service.smart_resume(
        db,
        settings=state.settings,
        project_path=body.project_path,
        session_id=body.session_id,
        budget=body.budget,
        gate=state.gemini_gate,
        gemini=state.briefing_client,
    )
