"""Forwarding to the upstream Gemini API: which headers travel, the URL, and transport errors.

The caller's own credentials (`x-goog-api-key`, `?key=`, `Authorization`) pass through untouched;
nothing here logs a header or a query string, so a key can never reach the logs.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
from functools import cache
from urllib.parse import quote

import httpx
from starlette.datastructures import Headers
from starlette.types import Scope

from app.config import Settings
from app.errors import AppError, BadRequest, UpstreamTimeout, UpstreamUnavailable

# Hop-by-hop headers (RFC 9110 §7.6.1) plus the ones the transport recomputes for the new hop.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# httpx negotiates and decodes compression itself, so the relayed bytes are always plain. Our
# server sets `Date` and `Server` for its own hop: relayed too, an answer carried two of each.
_REQUEST_DROP = _HOP_BY_HOP | {"accept-encoding"}
_RESPONSE_DROP = _HOP_BY_HOP | {"content-encoding", "date", "server"}
OUR_HEADER_PREFIX = "x-agmem-"
_CORS_PREFIX = "access-control-"

_KEY_IN_TEXT = re.compile(r"(key=)[^&\s'\"]+", re.IGNORECASE)


class UnforwardableRequest(BadRequest):
    """The caller's URL cannot be sent on (httpx refuses it: too long, or malformed)."""


def upstream_url(base: str, scope: Scope) -> str:
    """The upstream URL: the caller's path and query string byte for byte, as sent.

    The raw path keeps the caller's percent-encoding: the decoded one may hold characters (a NUL,
    a newline, a space in a model name) that are not valid in a URL.
    """
    raw_path: bytes | None = scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path else quote(scope["path"], safe="/:@!$&'()*+,;=")
    url = base.rstrip("/") + path
    query_string: bytes = scope.get("query_string", b"")
    if query_string:
        url += "?" + query_string.decode("latin-1")
    return url


def forwardable_url(base: str, scope: Scope) -> str:
    """`upstream_url`, or a 400 when httpx cannot send it (checked before anything is captured)."""
    url = upstream_url(base, scope)
    try:
        httpx.URL(url)
    except httpx.InvalidURL as error:
        raise UnforwardableRequest(f"the request URL cannot be forwarded: {error}") from None
    return url


def request_headers(headers: Headers) -> list[tuple[str, str]]:
    """The caller's headers minus hop-by-hop ones and our own `X-Agmem-*` controls."""
    return [
        (name, value)
        for name, value in headers.items()
        if name not in _REQUEST_DROP and not name.startswith(OUR_HEADER_PREFIX)
    ]


def response_headers(headers: httpx.Headers) -> list[tuple[str, str]]:
    """The upstream's headers minus hop-by-hop ones, those that describe the raw transfer and its
    CORS: which pages may read an answer is this service's rule (app/api/origins.py), and an
    upstream's `Access-Control-Allow-Origin` beside ours made two, which a browser refuses."""
    return [
        (name, value)
        for name, value in headers.multi_items()
        if name not in _RESPONSE_DROP and not name.startswith(_CORS_PREFIX)
    ]


@cache
def upstream_ssl_context() -> ssl.SSLContext:
    """The TLS settings of every upstream client in this process, built once.

    Building one loads the whole CA bundle: 90-170 ms of CPU measured on the 2-core machine,
    which every app start paid again (each test app, each `agmem serve`). A context only holds
    configuration, so clients and threads can share it.
    """
    return httpx.create_ssl_context()


def make_http_client(timeout_s: float) -> httpx.AsyncClient:
    """The one upstream client of an app: pooled connections, a long read timeout for streams."""
    # httpcore may write a request's headers and body separately; with Nagle's algorithm on, the
    # body can then wait for the upstream's delayed ACK (~40 ms on Linux).
    transport = httpx.AsyncHTTPTransport(
        verify=upstream_ssl_context(),
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
    )
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
        follow_redirects=False,
        trust_env=False,
    )


def redact(text: str) -> str:
    """A transport error's text without any `key=` value it may quote."""
    return _KEY_IN_TEXT.sub(r"\1[redacted]", text)


def unreachable(settings: Settings, error: httpx.HTTPError) -> AppError:
    """The 502 a caller sees when the upstream cannot be reached, or the 504 when it took the
    call and did not answer in time (that said "could not be reached (ReadTimeout: ReadTimeout)",
    of an upstream that was reached, where a broken-off stream said 504)."""
    base = settings.gemini_upstream
    host = httpx.URL(base).host or base
    if isinstance(error, httpx.ReadTimeout):
        return UpstreamTimeout(
            f"the Gemini upstream {host} did not answer within "
            f"{settings.proxy_upstream_timeout_seconds:g} s "
            "(AGMEM_PROXY_UPSTREAM_TIMEOUT_SECONDS)"
        )
    reason = redact(str(error))
    kind = f"{type(error).__name__}: {reason}" if reason else type(error).__name__
    return UpstreamUnavailable(f"the Gemini upstream {host} could not be reached ({kind})")


def stream_error_event(sent: bytes | bytearray, error: httpx.HTTPError) -> bytes:
    """The SSE event that ends a stream the upstream broke off: Gemini's own error shape.

    A blank line first closes an event the upstream cut in half (the caller then fails on that
    event instead: still an error, never a cut answer that looks whole).
    """
    timed_out = isinstance(error, httpx.TimeoutException)
    code, status = (504, "DEADLINE_EXCEEDED") if timed_out else (502, "UNAVAILABLE")
    detail = {
        "code": code,
        "message": f"the Gemini upstream broke off the stream ({type(error).__name__})",
        "status": status,
    }
    boundary = b"" if not sent or sent.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")) else b"\r\n\r\n"
    return boundary + b"data: " + json.dumps({"error": detail}).encode() + b"\r\n\r\n"
