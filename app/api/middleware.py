"""Pure ASGI middleware: the bearer-token rule, the request body limit and UTF-8 URLs.

Written as raw ASGI rather than BaseHTTPMiddleware so that streaming responses (the Gemini proxy)
pass through untouched and the hot capture path pays no extra task per request.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Iterable
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import bare_host, is_loopback_host
from app.errors import (
    AppError,
    InvalidURL,
    MisdirectedRequest,
    PayloadTooLarge,
    Unauthorized,
)
from app.proxy import GEMINI_API_VERSIONS

PROTECTED_PREFIXES = ("/api/", "/mcp")


async def send_error(
    send: Send, status: int, error: str, detail: str, headers: dict[str, str] | None = None
) -> None:
    body = json.dumps({"error": error, "detail": detail}).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


async def send_app_error(send: Send, error: AppError) -> None:
    """`error` as the exception handler renders it, from a middleware that answers before any
    handler runs: status, name and headers come from its class in app/errors.py."""
    await send_error(send, error.status_code, error.error, error.detail, error.headers)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def expected_authorization(token: str | None) -> bytes | None:
    """The bearer token a request must carry, None when no token is set."""
    return token.encode() if token else None


def authorized(scope: Scope, expected: bytes | None) -> bool:
    """Whether the request's `Authorization` is `Bearer <expected>` (any, when None).

    The scheme is case-insensitive and may be followed by several spaces (RFC 7235, 6750):
    `bearer <token>`, as some HTTP clients write it, was refused as an invalid token."""
    if expected is None:
        return True
    scheme, _, presented = (_header(scope, b"authorization") or b"").partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(presented.lstrip(b" "), expected)


class BearerTokenMiddleware:
    """When a token is configured, every `/api/*` and `/mcp` request must present it."""

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self.expected = expected_authorization(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.expected is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if path.startswith(PROTECTED_PREFIXES) or path == "/api":
            if not authorized(scope, self.expected):
                presented = _header(scope, b"authorization")
                detail = (
                    "missing Authorization header; send 'Authorization: Bearer <token>'"
                    if not presented
                    else "the bearer token is not valid"
                )
                await send_app_error(send, Unauthorized(detail))
                return
        await self.app(scope, receive, send)


def host_name(host: str) -> str:
    """The name in a `Host` header, without its port: `[::1]:37777` is `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, colon, port = host.rpartition(":")
    return name if colon and (port.isdigit() or not port) else host


class LoopbackHostMiddleware:
    """On a loopback-bound service, answer only requests addressed to this machine (421 else).

    A web page can reach 127.0.0.1 through DNS rebinding: its own domain, resolved again to
    127.0.0.1, makes the browser treat the service as the page's own origin, free to read
    `/api/context` and `/api/memories` and to write memories that the next prompt injects. Such
    a request still names the page's domain in `Host`. `/mcp` refused those already; the rest of
    the service answered them. `localhost`, loopback addresses and `AGMEM_ALLOWED_HOSTS` pass.
    """

    def __init__(self, app: ASGIApp, *, extra_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.extra = allowed_host_names(extra_hosts)
        # Clients send one or two spellings; the verdict per header value is kept (bounded).
        self.verdicts: dict[bytes, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = _header(scope, b"host")
            if host is not None and not self._allowed(host):
                shown = host.decode("latin-1")[:200]
                detail = (
                    f"this service answers requests addressed to localhost, not {shown!r} "
                    "(add the name to AGMEM_ALLOWED_HOSTS if it is this machine)"
                )
                await send_app_error(send, MisdirectedRequest(detail))
                return
        await self.app(scope, receive, send)

    def _allowed(self, host: bytes) -> bool:
        verdict = self.verdicts.get(host)
        if verdict is None:
            verdict = names_this_machine(host, self.extra)
            if len(self.verdicts) < 256:
                self.verdicts[host] = verdict
        return verdict


def allowed_host_names(names: Iterable[str]) -> frozenset[str]:
    """AGMEM_ALLOWED_HOSTS as `names_this_machine` compares them."""
    return frozenset(bare_host(name).lower() for name in names)


def names_this_machine(host: bytes, extra: frozenset[str]) -> bool:
    """The Host rule's verdict on a `Host` value: `localhost`, a loopback address or one of
    `extra` (AGMEM_ALLOWED_HOSTS, lower-case, without brackets)."""
    name = host_name(host.decode("latin-1"))
    return name in extra or is_loopback_host(name)


class BodySizeLimitMiddleware:
    """Refuse bodies over the limit with 413, by Content-Length or while streaming."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = f"the request body exceeds the limit of {self.max_bytes} bytes"
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await send_app_error(send, PayloadTooLarge(detail))
            return

        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(detail)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not response_started:
                await send_app_error(send, PayloadTooLarge(detail))


class BodyTooLarge(Exception):
    """The body went past the limit while it streamed in (its message: the 413's detail).

    FastAPI reads a route's body itself and answers any error of the reading as its own `400
    There was an error parsing the body`, this one's cause; `app.api.errors` makes that a 413."""


# An escape of a byte past ASCII: only a URL holding one can decode to something not UTF-8.
_HIGH_ESCAPE = re.compile(rb"%[89a-fA-F]")


def not_utf8(raw: bytes) -> bool:
    """Whether percent-decoding `raw` (a path or query string) gives bytes that are not UTF-8."""
    if _HIGH_ESCAPE.search(raw) is None:
        return False
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


class Utf8UrlMiddleware:
    """Refuse an `/api/` URL whose path or query percent-encodes bytes that are not UTF-8 (400).

    The server decodes such bytes each as U+FFFD (`%FF`, `%FE`, a lone surrogate's `%ED%A0%80`),
    so different keys, ids and project paths became one: `PUT /api/memories/a%FE` replaced the
    memory `a%FF` stored, and the one a client stored as `a%EF%BF%BD`. A body's text is cleaned
    (../shared/API.md); a name in a URL is what a client finds its data by, so it is refused.
    The whole query string counts, and the check runs before routing (a wrong method is a 400,
    not a 405). `POST /api/observe` and `/api/observe/result` take app/api/hot.py's fast path,
    not this one: fixed paths that read no query.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith("/api/"):
            raw_path: bytes = scope.get("raw_path") or scope.get("path", "").encode()
            for part, raw in (("path", raw_path), ("query", scope.get("query_string", b""))):
                if not_utf8(raw):
                    detail = (
                        f"the URL's {part} percent-encodes bytes that are not UTF-8 text; "
                        "encode names as UTF-8 before percent-encoding them (é is %C3%A9)"
                    )
                    await send_app_error(send, InvalidURL(detail))
                    return
        await self.app(scope, receive, send)


# The Gemini proxy's paths (app/proxy/routes.py) are the upstream's, and relay a HEAD to it as
# a HEAD: made a GET here, it would fetch the upstream's whole answer to throw it away.
RELAYED_PREFIXES = tuple(f"/{version}/" for version in GEMINI_API_VERSIONS)


class HeadAsGetMiddleware:
    """Answer HEAD as GET, without the body (RFC 9110, 9.3.2: every GET resource answers HEAD).

    FastAPI's routes take the methods they name, GET alone: `curl -I /health`, and a monitor
    that checks by HEAD, got 405. The route sees a GET; the headers, status and Content-Length
    are the GET's. A route that takes no GET answers its 405 (or 404) as it does a GET; the
    Gemini proxy's paths are left to its routes, which relay HEAD upstream. The server leaves
    out the body of a HEAD answer itself (uvicorn reads its own scope); it is dropped here too,
    for a server or test client that would send it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "HEAD"
            or scope.get("path", "").startswith(RELAYED_PREFIXES)
        ):
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
