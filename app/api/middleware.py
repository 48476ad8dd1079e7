"""Pure ASGI middleware: the bearer-token rule and the request body limit.

Written as raw ASGI rather than BaseHTTPMiddleware so that streaming responses (the Gemini proxy)
pass through untouched and the hot capture path pays no extra task per request.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
                await send_error(send, 401, "Unauthorized", detail, {"WWW-Authenticate": "Bearer"})
                return
        await self.app(scope, receive, send)


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
            await send_error(send, 413, "PayloadTooLarge", detail)
            return

        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not response_started:
                await send_error(send, 413, "PayloadTooLarge", detail)


class _BodyTooLarge(Exception):
    pass
