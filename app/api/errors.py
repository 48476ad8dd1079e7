"""Render every error, ours or the framework's, as `{"error": "<Type>", "detail": "..."}`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import psycopg
import structlog
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.types import Scope

from app.api.middleware import BodyTooLarge
from app.api.outage_log import OUTAGE_LOG
from app.errors import (
    AppError,
    BadRequest,
    ClientDisconnected,
    Conflict,
    DatabaseUnavailable,
    Forbidden,
    HTTPError,
    InternalError,
    InvalidData,
    InvalidJSON,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
    first_line,
    sqlstate,
    validator_reason,
)
from app.exactjson import UnkeptJson

if TYPE_CHECKING:
    # FastAPI (~0.2 s to import) only where an app is built: `agmem mcp` on stdio shares this
    # module's error wording (starlette's request and response are FastAPI's own classes).
    from fastapi import FastAPI

log = structlog.get_logger(__name__)

# The framework's errors (its router's 404 and 405, a route's HTTPException) by status.
_HTTP_ERRORS: dict[int, type[AppError]] = {
    error.status_code: error
    for error in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        NotAcceptable,
        Conflict,
        PayloadTooLarge,
        UnsupportedMediaType,
        ValidationFailed,
        TooManyRequests,
        ServiceUnavailable,
    )
}


def error_response(
    status_code: int, error: str, detail: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": error, "detail": detail}, status_code=status_code, headers=headers
    )


_JSON_KINDS = {list: "an array", str: "a string", bool: "a boolean", int: "a number"}


def json_kind(value: object) -> str:
    """What a JSON value is, in words: `null`, `an array`, `a number`..."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    return next((name for cls, name in _JSON_KINDS.items() if isinstance(value, cls)), "a number")


def describe_validation_errors(errors: list[Any]) -> str:
    """One readable sentence per problem: `body.sessionId: Field required`."""
    parts = []
    for error in errors[:5]:
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        message = validator_reason(str(error.get("msg", "invalid")))
        if str(error.get("type")).endswith("_type") and "input" in error:
            # "sessionId: Input should be a valid string" did not say a null had been sent.
            message = f"{message}, not {json_kind(error['input'])}"
        parts.append(f"{location}: {message}" if location else message)
    if len(errors) > 5:
        parts.append(f"and {len(errors) - 5} more")
    return "; ".join(parts)


def app_error_response(error: AppError) -> JSONResponse:
    """`error` answered with its class's status, name and headers."""
    return error_response(error.status_code, error.error, error.detail, error.headers)


async def _app_error(_: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, AppError)
    return app_error_response(error)


NESTED_TOO_DEEPLY = "it is nested too deeply"


def invalid_json(reason: str) -> JSONResponse:
    if "integer string conversion" in reason:
        # Python's int() refuses more than 4300 digits; its message ends by naming the function
        # that would raise the limit, advice for the server's code, not for the client.
        reason = f"a number has more than {sys.get_int_max_str_digits()} digits"
    elif "maximum recursion depth" in reason:
        # Capture parses bodies itself and passes on the RecursionError's words.
        reason = NESTED_TOO_DEEPLY
    return app_error_response(InvalidJSON(f"the request body is not valid JSON: {reason}"))


def is_json_content_type(content_type: str) -> bool:
    subtype = content_type.split(";", 1)[0].strip().lower().rpartition("/")[2]
    return subtype == "json" or subtype.endswith("+json")


_NOT_AN_OBJECT = {"missing", "model_attributes_type", "model_type", "dict_type"}


def whole_body_problem(request: Request, errors: list[Any]) -> str | None:
    """What is wrong with a body that is not a JSON object at all, in words a client can act on.

    Pydantic says "Input should be a valid dictionary or object to extract fields from" (or
    "Field required" for an empty body): `curl -d` without `-H 'Content-Type: application/json'`
    sends a form type, whose body FastAPI does not read as JSON, and got only that sentence."""
    item = next((e for e in errors if tuple(e.get("loc", ())) == ("body",)), None)
    if item is None or item.get("type") not in _NOT_AN_OBJECT:
        return None
    content_type = request.headers.get("content-type")
    value = item.get("input")
    if isinstance(value, bytes | bytearray) or (
        content_type is not None and not is_json_content_type(content_type)
    ):
        sent = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        return (
            f"send the body as JSON with 'Content-Type: application/json' (this request had {sent})"
        )
    if item.get("type") == "missing":
        return "the request body is empty; send a JSON object"
    return f"the request body must be a JSON object, not {json_kind(value)}"


async def _validation_error(request: Request, error: Exception) -> JSONResponse:
    from fastapi.exceptions import RequestValidationError

    assert isinstance(error, RequestValidationError)
    errors = list(error.errors())
    if any(item.get("type") == "json_invalid" for item in errors):
        first = next(item for item in errors if item.get("type") == "json_invalid")
        return invalid_json((first.get("ctx") or {}).get("error", "malformed JSON"))
    unkept = next((item for item in errors if unkept_json(item)), None)
    if unkept is not None:
        # A number the body's JSON parse read as inf or nan: what the body holds, not a field's
        # shape, is the problem (the field is named all the same).
        return app_error_response(InvalidJSON(describe_validation_errors([unkept])))
    detail = whole_body_problem(request, errors) or describe_validation_errors(errors)
    return app_error_response(ValidationFailed(detail))


def unkept_json(error: Any) -> bool:
    """Whether a pydantic error is a number a write cannot keep (`exactjson.check_numbers`) or
    JSON text it cannot parse (`exactjson.parse_written_text`): `InvalidJSON`, on every
    surface, not a field's `ValidationFailed`."""
    return isinstance((error.get("ctx") or {}).get("error"), UnkeptJson)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 400 and isinstance(error.__cause__, ClientDisconnect):
        # FastAPI reads a route's body itself and makes the close its vague 400, logged nowhere.
        client_gone(request.scope)
        return await _app_error(request, ClientDisconnected(CLIENT_GONE_DETAIL))
    # FastAPI answers a body `json.loads` fails on other than by JSONDecodeError (nesting past the
    # recursion limit, bytes that are no Unicode encoding, an integer of thousands of digits)
    # with a vague "error parsing the body".
    if error.status_code == 400 and isinstance(error.__cause__, BodyTooLarge):
        return app_error_response(PayloadTooLarge(str(error.__cause__)))
    if error.status_code == 400 and isinstance(error.__cause__, RecursionError):
        return invalid_json(NESTED_TOO_DEEPLY)
    if error.status_code == 400 and isinstance(error.__cause__, UnicodeDecodeError):
        return invalid_json("it is not UTF-8 text")
    if error.status_code == 400 and isinstance(error.__cause__, ValueError):
        return invalid_json(str(error.__cause__))
    name = _HTTP_ERRORS.get(error.status_code, HTTPError).wire_name
    detail = error.detail if isinstance(error.detail, str) else str(error.detail)
    return error_response(error.status_code, name, detail, getattr(error, "headers", None))


def refused_value(error: Exception) -> str | None:
    """Why Postgres refused a value a client sent, or None for any other database error.

    SQLSTATE class 22 (data exceptions) and 54 (over a limit: an index row over 2704 bytes, too
    many arguments). psycopg classes the second as an OperationalError, with the errors of an
    unreachable database."""
    if sqlstate(error)[:2] in ("22", "54"):
        return f"the database rejected a value: {first_line(error)}"
    return None


# The errors of a database that cannot be reached: SQLAlchemy's from its sessions, psycopg's from
# the capture hot path's raw pool (psycopg_pool's PoolTimeout is an OperationalError).
UNREACHABLE_ERRORS: tuple[type[Exception], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


# Errors psycopg classes with an unreachable database's (OperationalError) from a database that
# did answer: a team's server sets lock or statement timeouts on its role, or runs out of room.
# Saying "unreachable" for them sent an operator looking for a network problem. By SQLSTATE, then
# by its class (the first two characters).
_ANSWERED = {
    "55P03": "a row the request needs is locked by another change; retry shortly",
    "57014": "the database cancelled the statement (a timeout, or an operator); retry shortly",
    "40P01": "the request deadlocked with another change; retry shortly",
    "40001": "the request conflicted with another change; retry shortly",
    "53100": "the database's disk is full; retry once space is freed",
    "53": "the database is out of memory or connections; retry shortly",
    # Its files: an I/O error (class 58), which psycopg classes as an OperationalError too, and
    # damaged data or index pages (XX001, XX002, InternalErrors), which were a 500 with two
    # tracebacks and the client's connection closed.
    "58": "the database could not read or write its files (see its log); retry once it is repaired",
    "XX001": "the database failed inside (a damaged or unwritable file, a full or failing disk: "
    "see its log); retry once it is repaired",
    "XX002": "the database failed inside (a damaged index: see its log); retry once it is repaired",
}

# Not XX000 (`elog(ERROR)`: "cache lookup failed", "variable not found in subplan target list"):
# a fault in a query or in Postgres that fails the same way every time, so a retry cannot help
# and each one must stay a 500 whose traceback is logged, not a line in a quiet count.
_DAMAGED_FILES = ("XX001", "XX002")


def failed_inside(error: Exception) -> bool:
    """Whether `error` is Postgres's damaged data or index (SQLSTATE XX001, XX002), which an
    operator repairs, not the request's failure or a bug's."""
    return sqlstate(error) in _DAMAGED_FILES


def database_unavailable(error: Exception) -> DatabaseUnavailable:
    """What a client is told of a database that cannot serve the request now (the reason, which
    may name its socket, host or files, goes to the log)."""
    state = sqlstate(error)
    detail = _ANSWERED.get(state) or _ANSWERED.get(state[:2])
    if detail is None:
        OUTAGE_LOG.warn("database.unreachable", "", error=first_line(error))
        return DatabaseUnavailable("the database is unreachable; retry shortly")
    OUTAGE_LOG.warn("database.refused_request", state, sqlstate=state, error=first_line(error))
    return DatabaseUnavailable(detail)


async def _database_unreachable(request: Request, error: Exception) -> JSONResponse:
    if refused_value(error):
        # A long random project path or tag was a 503 "retry shortly": a retry fails the same.
        return await _data_error(request, error)
    return app_error_response(_noted(request, error, database_unavailable(error)))


async def _internal_error(request: Request, error: Exception) -> JSONResponse:
    if failed_inside(error):
        return app_error_response(_noted(request, error, database_unavailable(error)))
    return await _unexpected(request, error)


def _noted(request: Request, error: Exception, refusal: DatabaseUnavailable) -> DatabaseUnavailable:
    """`refusal`, kept for /health when the database could not store (a full or failing disk)."""
    state = getattr(request.app.state, "agmem", None)
    if state is not None:
        state.storage_refusals.note_if_storage(error, str(refusal))
    return refusal


async def _data_error(_: Request, error: Exception) -> JSONResponse:
    # Input cleaning should stop these first; this keeps a value Postgres rejects from being a 500.
    detail = refused_value(error) or f"the database rejected a value: {first_line(error)}"
    return app_error_response(InvalidData(detail))


async def _integrity_error(_: Request, error: Exception) -> JSONResponse:
    message = first_line(error)
    return app_error_response(Conflict(f"the change conflicts with stored data: {message}"))


# Ordinary client behaviour (a killed agent, a network drop), not the service's failure: was a
# `request.failed` traceback, then uvicorn's "Exception in ASGI application" one.
CLIENT_GONE_DETAIL = "the client closed the connection before its request's body was sent"


def client_gone(scope: Scope) -> None:
    """Log a request whose client closed the connection before its body was sent."""
    log.info("request.aborted", method=scope["method"], path=scope["path"])


async def _client_disconnect(request: Request, _: Exception) -> JSONResponse:
    client_gone(request.scope)
    # Nobody reads it (the server drops an answer to a closed connection); sent so that every
    # layer in between sees a request answered.
    return await _app_error(request, ClientDisconnected(CLIENT_GONE_DETAIL))


async def _unexpected(_: Request, error: Exception) -> JSONResponse:
    log.exception("request.failed", error_type=type(error).__name__)
    return app_error_response(InternalError("an unexpected error occurred; it has been logged"))


def install_error_handlers(app: FastAPI) -> None:
    from fastapi.exceptions import RequestValidationError

    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_disconnect)
    for unreachable in UNREACHABLE_ERRORS:
        app.add_exception_handler(unreachable, _database_unreachable)
    app.add_exception_handler(sa_exc.DataError, _data_error)
    app.add_exception_handler(psycopg.DataError, _data_error)
    app.add_exception_handler(sa_exc.IntegrityError, _integrity_error)
    app.add_exception_handler(psycopg.IntegrityError, _integrity_error)
    app.add_exception_handler(sa_exc.InternalError, _internal_error)
    app.add_exception_handler(psycopg.InternalError, _internal_error)
    app.add_exception_handler(Exception, _unexpected)
