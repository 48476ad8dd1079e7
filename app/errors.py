"""One error hierarchy, rendered by one handler into `{"error": "<Type>", "detail": "..."}`."""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """An error's first line of text, for a one-line log or message; its class name when it has
    no text (a timeout's exception often has none: `str(error).splitlines()[0]` raised)."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


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
    """Base of every error a client may see. The class name is the `error` field."""

    status_code = 400
    headers: dict[str, str] | None = None

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    @property
    def error(self) -> str:
        return type(self).__name__


class BadRequest(AppError):
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


class NotFound(AppError):
    status_code = 404


class Conflict(AppError):
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


class DatabaseUnavailable(AppError):
    status_code = 503
    headers = {"Retry-After": "5"}


class UpstreamUnavailable(AppError):
    status_code = 502


class UpstreamTimeout(AppError):
    """The upstream took the call and did not answer in time: it was reached, so not a 502."""

    status_code = 504
