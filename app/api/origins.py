"""The browser-origin rule: which web pages may call the service, and CORS for those that may.

A browser tells the service which page a request comes from in `Origin`; curl, the CLI, SDKs,
IDE hooks and MCP clients send none, and are not concerned. Any site a developer visits can make
its page POST to `http://127.0.0.1:37777` without the browser asking first, as long as the body
is `text/plain` (a CORS "simple" request): the `/api` routes refuse a body not declared JSON, but
the Gemini proxy read it, forwarded the call with the project's memory under a key of the page's
choosing (`?key=`) and recorded the page's function responses as the project's tool calls.
Ollama (`OLLAMA_ORIGINS`) and Jupyter refuse a foreign `Origin` for the same reason.

Allowed: browser extensions (the interceptor's background sends `chrome-extension://<id>`), pages
of this machine (`http://localhost:*`, loopback addresses), a page of the service's own origin
(`/docs`) and `AGMEM_ALLOWED_ORIGINS`. Any other origin gets 403, preflight or not; an allowed
one gets CORS headers, and its preflights (`OPTIONS`, Chrome's Private Network Access question
too) are answered here, before the token rule: a browser never sends credentials with one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.middleware import host_name, send_app_error
from app.config import is_loopback_host
from app.errors import ForbiddenOrigin

# Only code the user installed runs under these; a web page cannot claim one.
EXTENSION_ORIGINS = ("chrome-extension://*", "moz-extension://*", "safari-web-extension://*")

PREFLIGHT_METHODS = b"GET, POST, PUT, PATCH, DELETE"  # the proxy's passthrough takes PATCH


class OriginPolicy:
    """Whether a browser origin may call the service (`extra`: AGMEM_ALLOWED_ORIGINS)."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        # Only `*` is a wildcard: fnmatch's `[...]` and `?` broke `http://[fd00::5]:3000`.
        self.patterns = [
            re.compile(".*".join(re.escape(part) for part in pattern.split("*")))
            for pattern in (*EXTENSION_ORIGINS, *(origin.lower() for origin in extra))
        ]
        # Browsers send one origin per page and one Host spelling; the verdicts are kept (bounded).
        self.verdicts: dict[tuple[bytes, bytes | None], bool] = {}

    def allows(self, origin: bytes, host: bytes | None) -> bool:
        key = (origin, host)
        verdict = self.verdicts.get(key)
        if verdict is None:
            verdict = self._judge(origin.decode("latin-1").lower(), host)
            if len(self.verdicts) < 256:
                self.verdicts[key] = verdict
        return verdict

    def _judge(self, origin: str, host: bytes | None) -> bool:
        if any(pattern.fullmatch(origin) for pattern in self.patterns):
            return True
        scheme, separator, authority = origin.partition("://")
        if not separator or scheme not in ("http", "https"):
            return False  # `null` (a sandboxed frame, a data: URL: any page can open one)
        same_origin = host is not None and authority == host.decode("latin-1").lower()
        return same_origin or is_loopback_host(host_name(authority))


CROSS_SITE_DETAIL = (
    "this service does not answer what another site's page loads from it (an image, a script, a "
    "frame: Sec-Fetch-Site cross-site); open it from the address bar, or call it from an "
    "extension or AGMEM_ALLOWED_ORIGINS"
)


def _top_level_navigation(scope: Scope) -> bool:
    """A link followed to the service, which the user sees (`/docs` from a README). A browser
    sends no Origin with a GET it makes for an `<img>`, `<script>` or frame of another site's
    page: such a GET of a memory counted as a read, and its status told the page whether the
    key exists."""
    return _headers(scope, b"sec-fetch-dest").get(b"sec-fetch-dest") == b"document"


def _headers(scope: Scope, *names: bytes) -> dict[bytes, bytes]:
    return {key: bytes(value) for key, value in scope["headers"] if key in names}


class BrowserOriginMiddleware:
    """Refuse a request from a web page whose origin is not allowed (403); answer an allowed
    origin's preflight, and add CORS headers to its answers."""

    def __init__(self, app: ASGIApp, *, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = fetch_site = None
        for key, value in scope["headers"]:
            if key == b"origin":
                origin = bytes(value)
                break
            if key == b"sec-fetch-site":
                fetch_site = value
        if origin is None:
            if fetch_site == b"cross-site" and not _top_level_navigation(scope):
                await send_app_error(send, ForbiddenOrigin(CROSS_SITE_DETAIL))
                return
            await self.app(scope, receive, send)
            return
        headers = _headers(
            scope,
            b"host",
            b"access-control-request-method",
            b"access-control-request-headers",
            b"access-control-request-private-network",
        )
        if not self.policy.allows(origin, headers.get(b"host")):
            shown = origin.decode("latin-1")[:200]
            detail = (
                f"this service does not answer web pages of {shown!r}: browser extensions, this "
                "machine's pages and AGMEM_ALLOWED_ORIGINS may call it (add the origin there if "
                "you trust every page it serves with your memory)"
            )
            await send_app_error(send, ForbiddenOrigin(detail))
            return
        cors = [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]
        if scope["method"] == "OPTIONS" and b"access-control-request-method" in headers:
            await _answer_preflight(send, cors, headers)
            return

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *cors]
            await send(message)

        await self.app(scope, receive, with_cors)


async def _answer_preflight(
    send: Send, cors: list[tuple[bytes, bytes]], asked: dict[bytes, bytes]
) -> None:
    headers = [
        *cors,
        (b"access-control-allow-methods", PREFLIGHT_METHODS),
        (b"access-control-max-age", b"600"),
    ]
    if b"access-control-request-headers" in asked:
        headers.append((b"access-control-allow-headers", asked[b"access-control-request-headers"]))
    if asked.get(b"access-control-request-private-network", b"").lower() == b"true":
        headers.append((b"access-control-allow-private-network", b"true"))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
