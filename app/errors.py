"""One error hierarchy, rendered by one handler into `{"error": "<Type>", "detail": "..."}`."""

from __future__ import annotations

from typing import Any, ClassVar


def first_line(error: BaseException) -> str:
    """An error's first line of text, for a one-line log or message; its class name when it has
    no text (a timeout's exception often has none: `str(error).splitlines()[0]` raised)."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def error_name(error: BaseException) -> str:
    """The class of the error behind `error`: psycopg's (`RaiseException`, `DiskFull`) for
    SQLAlchemy's wrapper, whose own class (`ProgrammingError`, `InternalError`) names only
    psycopg's broad family and hides which failure it was."""
    return type(getattr(error, "orig", None) or error).__name__


def sqlstate(error: BaseException) -> str:
    """The SQLSTATE of a database error, psycopg's or SQLAlchemy's wrapping one ("" for any other
    error): the one place that unwraps it, for the HTTP and MCP answers, the worker's log and
    the CLI's lines."""
    code = getattr(getattr(error, "orig", None) or error, "sqlstate", None)
    return code if isinstance(code, str) else ""


def validator_reason(message: str) -> str:
    """A pydantic error message without the "Value error, " it puts before a validator's own
    ValueError text (which already reads as the reason), wherever the message holds it."""
    return message.replace("Value error, ", "", 1)


class AppError(Exception):
    """Base of every error a client may see. Its `wire_name` is the `error` field: every surface
    (the HTTP handlers, the middleware, MCP, `agmem serve`'s raw HTTP/1.1 layer) names an error
    by its class here, never by a string of its own, so that a rename cannot drift between them.
    The wire name is the class's name unless the class declares another (`wire_name=` in its
    bases), for a name that would shadow a builtin in the modules importing the class."""

    status_code = 400
    headers: dict[str, str] | None = None
    wire_name: ClassVar[str] = "AppError"

    def __init_subclass__(cls, *, wire_name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.wire_name = wire_name or cls.__name__

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    @property
    def error(self) -> str:
        return self.wire_name


class BadRequest(AppError):
    """A request the service cannot read: its body's JSON (the framework's 400), or, in the raw
    HTTP/1.1 layer, a head it refuses (no Host, two, no HTTP version, another protocol)."""

    status_code = 400


class InvalidJSON(BadRequest):
    """A body whose JSON holds what the service cannot keep (NaN, Infinity, a number past a
    double), named as the framework names a body it cannot parse."""


class InvalidURL(BadRequest):
    """A URL whose percent-encoding is not UTF-8, refused by a middleware before routing."""


class ClientDisconnected(BadRequest):
    """A request whose client closed the connection before its body was sent: answered so that
    every layer in between sees it answered, read by nobody."""


class ValidationFailed(AppError):
    status_code = 422


class InvalidData(AppError):
    """A value that passed the request's checks and that Postgres refused (SQLSTATE class 22,
    a data exception, or 54, over a limit): the caller's to change, not a retry's."""

    status_code = 422


class NotFound(AppError):
    status_code = 404


class Conflict(AppError):
    """A change that conflicts with stored data (a domain rule, or Postgres's integrity error)."""

    status_code = 409


class Unauthorized(AppError):
    status_code = 401
    headers = {"WWW-Authenticate": "Bearer"}


class ForbiddenOrigin(AppError):
    """A web page's request the browser-origin rule refuses (an origin not allowed, or another
    site's page loading from the service), refused by a middleware before routing."""

    status_code = 403


class MisdirectedRequest(AppError):
    """A request to a loopback-bound service that names another host (DNS rebinding), refused
    by a middleware before routing."""

    status_code = 421


class PayloadTooLarge(AppError):
    status_code = 413


class AnswerTooLarge(AppError):
    """An MCP tool's answer over the tokens a tool may put into a model's context
    (app/mcp/server.py `check_answer_size`): a tool error only, no HTTP route answers it."""

    status_code = 413


class RequestTimeout(AppError):
    """A request whose head or body stopped coming (`agmem serve`'s raw HTTP/1.1 layer:
    app/cli/stalls.py)."""

    status_code = 408


class RequestHeaderFieldsTooLarge(AppError):
    """A request head past the raw HTTP/1.1 layer's bound (app/cli/headers.py)."""

    status_code = 431


class MethodNotImplemented(AppError, wire_name="NotImplemented"):
    """A method the service serves for no resource (CONNECT, an unknown one, a PRI that is not
    HTTP/2's preface), refused by the raw HTTP/1.1 layer (RFC 9110, 15.6.2). Sent as HTTP's
    reason phrase names it, as the others are; a class of that name shadowed the builtin
    constant in every module that imported it."""

    status_code = 501


class HTTPVersionNotSupported(AppError):
    """A request line of an HTTP major version other than 1, refused by the raw layer."""

    status_code = 505


class Forbidden(AppError):
    """The framework's 403, as the handler names it (our own refusals are ForbiddenOrigin)."""

    status_code = 403


class MethodNotAllowed(AppError):
    """The router's 405: a route asked with a method it does not take (its `Allow` header
    says which it does)."""

    status_code = 405


class NotAcceptable(AppError):
    """The framework's 406, as the handler names it."""

    status_code = 406


class UnsupportedMediaType(AppError):
    """The framework's 415, as the handler names it."""

    status_code = 415


class TooManyRequests(AppError):
    """The framework's 429, as the handler names it."""

    status_code = 429


class HTTPError(AppError):
    """The framework's error of a status no class here names; it keeps that status."""


class InternalError(AppError):
    """A bug: an exception nothing else handles. Its detail says only that it was logged."""

    status_code = 500


class ServiceUnavailable(AppError):
    """The service, not its database, cannot take the request now: the MCP endpoint not
    started, `agmem serve` past its connection limit or stopping. Its Retry-After varies."""

    status_code = 503


class DatabaseUnavailable(AppError):
    status_code = 503
    headers = {"Retry-After": "5"}


class UpstreamUnavailable(AppError):
    status_code = 502


class UpstreamTimeout(AppError):
    """The upstream took the call and did not answer in time: it was reached, so not a 502."""

    status_code = 504
