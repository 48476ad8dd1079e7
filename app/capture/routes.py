"""HTTP routes of "Sessions and capture" (API.md). Thin: parse, call the service, shape."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

import orjson
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from app import exactjson
from app.api import paths  # noqa: F401 - registers the `{name:any}` paths below use
from app.api.deps import DbDep, ProjectPathQuery, SettingsDep, two_spellings_query
from app.api.errors import is_json_content_type
from app.api.responses import ExactJSONResponse
from app.api.times import ExclusiveRequestTime
from app.capture import service
from app.capture.db import capture_lifespan, capture_writer
from app.capture.schemas import (
    CompressIn,
    ObserveIn,
    ObserveResultIn,
    SessionEndIn,
    SessionStartIn,
    SummarizeIn,
)
from app.db.models import ObservationRow, SessionRow
from app.privacy import surrogates_replaced
from app.state import AppState

router = APIRouter(prefix="/api", tags=["capture"], lifespan=capture_lifespan)

SessionStatus = Literal["active", "ending", "summarized", "failed"]


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a Z, as the contract's responses use."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def session_json(row: SessionRow) -> dict[str, Any]:
    return exactjson.flag_json_text(_session_json(row), "metadata")


def _session_json(row: SessionRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "projectPath": row.project_path,
        "status": row.status,
        "userPrompt": row.user_prompt,
        "createdBy": row.created_by,
        "metadata": row.metadata_,
        "summary": row.summary,
        "summaryGeneratedBy": row.summary_generated_by,
        "createdAt": iso(row.created_at),
        "lastActivityAt": iso(row.last_activity_at),
        "endedAt": iso(row.ended_at),
        "summarizedAt": iso(row.summarized_at),
    }


def observation_json(row: ObservationRow) -> dict[str, Any]:
    return exactjson.flag_json_text(_observation_json(row), "functionArgs", "result", "entities")


def _observation_json(row: ObservationRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "sessionId": row.session_id,
        "projectPath": row.project_path,
        "seq": row.seq,
        "functionName": row.function_name,
        "functionArgs": row.function_args,
        "result": row.result,
        "status": row.status,
        "observationType": row.observation_type,
        "entities": row.entities,
        "compressedData": row.compressed_data,
        "generatedBy": row.generated_by,
        "originalTokens": row.original_tokens,
        "compressedTokens": row.compressed_tokens,
        "tokensSaved": row.tokens_saved,
        "argsBytes": row.args_bytes,
        "resultBytes": row.result_bytes,
        "truncated": row.truncated,
        "attempts": row.attempts,
        "lastError": row.last_error,
        "observedAt": iso(row.observed_at),
        "createdAt": iso(row.created_at),
        "resultAt": iso(row.result_at),
        "compressedAt": iso(row.compressed_at),
        # No result was recorded, and none is awaited any more: the worker gave up waiting for
        # it (docs/worker.md), or it was compressed early. A result sent with this id still
        # attaches.
        "resultMissing": row.status != "pending" and row.result_at is None,
    }


class _JSONAnswer(Response):
    """JSON bytes with the headers JSONResponse sends (content-length, then content-type), set
    directly: Response's general header building was ~1.5 µs of a capture answer."""

    media_type = "application/json"

    def __init__(self, content: bytes, status_code: int) -> None:
        self.body = content
        self.status_code = status_code
        self.background = None
        self.raw_headers = [
            (b"content-length", str(len(content)).encode()),
            (b"content-type", b"application/json"),
        ]


def _observation_answer(ref: service.ObservationRef, status_code: int) -> Response:
    body: dict[str, Any] = {"id": ref.id, "status": ref.status}
    if ref.id is not None:
        body |= {"observationType": ref.observation_type, "originalTokens": ref.original_tokens}
        if ref.truncated:
            body["truncated"] = True
    # The same bytes and headers as JSONResponse, whose json.dumps took ~4 µs more per answer.
    return _JSONAnswer(orjson.dumps(body), status_code)


async def _read_body(request: Request) -> bytes:
    """The request body, read from the ASGI messages as `Request.body()` reads it, without its
    async generator (~4 µs a capture request); kept on the request, as that would keep it."""
    receive = request.receive
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    request._body = body  # what Request.body() sets, for any later reader
    return body


Model = TypeVar("Model", bound=BaseModel)


async def parse_body(request: Request, model: type[Model]) -> Model:
    """The JSON body as `model`, parsed once from the raw bytes, with FastAPI's error shapes.

    FastAPI would `json.loads` the body into dicts and then validate them; pydantic's own parser
    builds the model straight from the bytes, about 4x faster on 1-20 KB bodies. What it refuses
    but `json` accepts (lone surrogate escapes such as "\\ud800", which are stored cleaned, and
    nesting past its recursion limit) takes the framework's path, so every answer is unchanged;
    the lone surrogates of the body's own fields (ids, names, paths) are replaced there.
    """
    body = await _read_body(request)
    content_type = request.headers.get("content-type")
    if not content_type or not is_json_content_type(content_type):
        # As FastAPI does: a body that is not declared JSON is validated as bytes (a 422). That
        # includes a body with no Content-Type (FastAPI's strict default): a web page can send
        # one to 127.0.0.1 without the browser asking the service first (a Blob body), and these
        # two routes read it as JSON, while every other route refused it.
        try:
            return model.model_validate(body)
        except ValidationError as error:
            raise RequestValidationError(_in_body(error)) from None
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        if not any(item["type"] == "json_invalid" for item in error.errors()):
            raise RequestValidationError(_in_body(error)) from None
    if not body:
        # As FastAPI reads an empty body: missing, which the error handler names as empty.
        missing = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
        raise RequestValidationError([missing])
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as error:
        detail = {"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error"}
        raise RequestValidationError([detail | {"ctx": {"error": str(error)}}]) from None
    try:
        # pydantic's parser refuses any lone surrogate, so a body holding one comes this way,
        # and only such a body pays for the cleaning of its fields.
        return model.model_validate(surrogates_replaced(value))
    except ValidationError as error:
        raise RequestValidationError(_in_body(error)) from None


def _in_body(error: ValidationError) -> list[Any]:
    return [item | {"loc": ("body", *item["loc"])} for item in error.errors(include_url=False)]


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


# The two hot routes take the request, parse its body and open their connection themselves:
# FastAPI's dependency resolution (settings, state, a yield dependency and its exit stack) and its
# body parsing cost more CPU per request in the profile than everything else the route does
# outside the database. The app calls them past the framework's layers (`HOT_ENDPOINTS`,
# app/api/hot.py); they are also the app's first own routes (`add_hot_routes`, matched in order),
# for the OpenAPI schema and the requests the short path leaves to the full stack.


class DirectRoute(APIRoute):
    """A route whose endpoint takes the `Request` alone and returns its `Response`: called as is.

    FastAPI's request handler still ran for such an endpoint: endpoint context for error
    messages, telemetry hooks, `solve_dependencies` (which builds the query parameters and a
    dependency cache for an endpoint that has none) and its response checks, ~7% of the capture
    server's CPU in the profile. The route's matching, its exception handling (every error still
    reaches the app's handlers) and its OpenAPI entry are FastAPI's as before.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        if self.dependant.dependencies or self.dependencies:
            # Dependencies need FastAPI's resolution: such a route gets the standard handler.
            return super().get_route_handler()
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        return endpoint


async def observe(request: Request) -> Response:
    """Record a tool call (201); a repeated id answers 200 with the first result."""
    data = await parse_body(request, ObserveIn)
    state: AppState = request.app.state.agmem
    db = capture_writer(request)
    # The body too (read once, kept by parse_body): a value holding a float is read from it
    # again, its numbers as written.
    ref, created = await service.record_observation(
        db, data=data, settings=state.settings, sent=await request.body()
    )
    return _observation_answer(ref, 201 if created else 200)


async def observe_result(request: Request) -> Response:
    """Attach a tool result to its call (200), or record it as a new observation (201)."""
    data = await parse_body(request, ObserveResultIn)
    state: AppState = request.app.state.agmem
    db = capture_writer(request)
    ref, created = await service.record_result(
        db, data=data, settings=state.settings, sent=await request.body()
    )
    return _observation_answer(ref, 201 if created else 200)


# The OpenAPI entries name every success status a route answers with (the routes build their
# responses themselves, so FastAPI would list a plain 200).
_REPEATED = {"description": "The same id again (nothing added), or an excluded project"}
_EXCLUDED = {"description": "An excluded project: nothing stored"}
_UNMATCHED = {"description": "No pending call matched: recorded as a new captured observation"}

_HOT_ROUTES = (
    ("/observe", observe, ObserveIn, 201, {200: _REPEATED}),
    ("/observe/result", observe_result, ObserveResultIn, 200, {201: _UNMATCHED}),
)


# The app answers these past the framework's layers (`app.api.hot`); registered on the router
# too (`add_hot_routes`), for the OpenAPI schema and for requests the short path leaves alone.
HOT_ENDPOINTS = {router.prefix + path: endpoint for path, endpoint, *_ in _HOT_ROUTES}


def add_hot_routes(app: FastAPI) -> None:
    """Register `observe` and `observe/result` on the app's own router, ahead of the routers.

    FastAPI (0.165) keeps an included router's routes behind it: a request for one of them is
    matched against the included router, then again inside it, with its scope bookkeeping each
    time. For these two that cost ~25 µs a request (in process, a trivial endpoint behind the
    real app's middlewares: 85 -> 60 and 77 -> 50 µs), on the capture benchmark's ~0.75 ms.
    """
    for path, endpoint, model, status_code, other in _HOT_ROUTES:
        app.router.add_api_route(
            router.prefix + path,
            endpoint,
            methods=["POST"],
            status_code=status_code,
            responses=dict(other.items()),
            openapi_extra=_body_schema(model),
            tags=list(router.tags),
            route_class_override=DirectRoute,
        )


@router.post("/session/start", status_code=201, responses={200: _REPEATED})
async def start_session(
    request: Request, data: SessionStartIn, db: DbDep, settings: SettingsDep
) -> JSONResponse:
    """Start a session (201), or return the same one for a repeated id (200)."""
    ref, created = await service.start_session(
        db, data=data, settings=settings, sent=await request.body()
    )
    body = {
        "id": ref.id,
        "projectPath": ref.project_path,
        "status": ref.status,
        "createdAt": iso(ref.created_at),
    }
    return JSONResponse(body, status_code=201 if created else 200)


@router.post("/session/end", status_code=202, responses={200: _EXCLUDED})
async def end_session(data: SessionEndIn, db: DbDep) -> JSONResponse:
    """End a session; the worker summarises it."""
    ref = await service.end_session(db, session_id=data.session_id)
    status_code = 200 if ref.status == service.EXCLUDED else 202
    return JSONResponse({"sessionId": ref.id, "status": ref.status}, status_code=status_code)


# A session id, as long as one may be.
BeforeIdQuery = Annotated[
    str | None, two_spellings_query("beforeId", "before_id", min_length=1, max_length=200)
]


@router.get("/sessions")
async def list_sessions(
    db: DbDep,
    project_path: ProjectPathQuery,
    status: SessionStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: ExclusiveRequestTime | None = None,
    before_id: BeforeIdQuery = None,
) -> JSONResponse:
    """Sessions, newest first; `beforeId` (the last session of a page) gives the next page."""
    rows = await service.list_sessions(
        db,
        project_path=project_path,
        status=status,
        limit=limit,
        before=before,
        before_id=before_id,
    )
    return ExactJSONResponse({"sessions": [session_json(row) for row in rows]})


@router.get("/sessions/{session_id:any}")
async def get_session(session_id: str, db: DbDep) -> JSONResponse:
    """One session with its summary and observation totals."""
    detail = await service.get_session(db, session_id=session_id)
    body = session_json(detail.row) | {
        "totalObservations": detail.total_observations,
        "tokensSaved": detail.tokens_saved,
        "observationCounts": detail.observation_counts,
    }
    return ExactJSONResponse(body)


@router.get("/observations/{observation_id:any}")
async def get_observation(observation_id: str, db: DbDep) -> JSONResponse:
    """One observation: raw args and result, compressed data, tokens and status."""
    row = await service.get_observation(db, observation_id=observation_id)
    return ExactJSONResponse(observation_json(row))


@router.post("/compress", status_code=202)
async def compress(data: CompressIn, db: DbDep) -> JSONResponse:
    """Queue an observation for compression by the worker."""
    position = await service.queue_compression(db, observation_id=data.observation_id)
    return JSONResponse({"queued": True, "position": position}, status_code=202)


@router.post("/summarize", status_code=202)
async def summarize(data: SummarizeIn, db: DbDep) -> JSONResponse:
    """Queue a session for summarising by the worker."""
    ref = await service.queue_summary(db, session_id=data.session_id)
    return JSONResponse(
        {"queued": True, "sessionId": ref.id, "status": ref.status}, status_code=202
    )
