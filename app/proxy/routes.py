"""The Gemini-compatible routes: `/v1beta|v1/models/{model}:generateContent|streamGenerateContent`.

Each call: build the project's memory block and put it in `systemInstruction`, forward to the
upstream with the caller's own key, relay the answer as it arrives, and hand a copy to capture,
which runs in the background and can never fail the call.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar
from urllib.parse import unquote

import httpx
import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from app.api import paths  # noqa: F401 - registers the `{name:any}` paths below use
from app.api.abort import abort_answer
from app.config import Settings
from app.errors import Unauthorized
from app.projects import canonical_project
from app.proxy import GEMINI_API_VERSIONS
from app.proxy.body import RequestBody, injected, parse_body
from app.proxy.capture import Answer, CaptureRequest, Progress
from app.proxy.forward import (
    forwardable_url,
    request_headers,
    response_headers,
    stream_error_event,
    unreachable,
)
from app.proxy.inject import has_memory_block, last_user_prompt
from app.proxy.sse import EventHolder
from app.proxy.state import ProxyState, get_app_state, get_proxy_state, proxy_lifespan

_T = TypeVar("_T")
log = structlog.get_logger(__name__)

router = APIRouter(tags=["gemini-proxy"], lifespan=proxy_lifespan)

PROJECT_HEADER = "x-agmem-project"
SESSION_HEADER = "x-agmem-session"
INJECT_HEADER = "x-agmem-inject"
TOKEN_HEADER = "x-agmem-token"


class ProxyUnauthorized(Unauthorized):
    """The service has a token and the proxied call did not present it in `X-Agmem-Token`."""

    headers = {"WWW-Authenticate": 'Token header="X-Agmem-Token"'}


def _check_token(request: Request, settings: Settings) -> None:
    if settings.api_token is None:
        return
    presented = request.headers.get(TOKEN_HEADER, "").encode()
    if not hmac.compare_digest(presented, settings.api_token.encode()):
        raise ProxyUnauthorized(
            "this service has AGMEM_API_TOKEN set; send it in the X-Agmem-Token header"
            if not presented
            else "the X-Agmem-Token header does not match AGMEM_API_TOKEN"
        )


def _header_text(value: str) -> str:
    """A header's text, for a project path that is not ASCII.

    HTTP header values are bytes, which the server reads as latin-1; google-genai (httpx) and
    fetch refuse non-ASCII values outright, so such a client must percent-encode the path
    (`/home/d%C3%A9v/shop`), and curl sends the raw UTF-8 bytes. Either way `/home/dév/shop` was
    stored as `/home/dÃ©v/shop` or left encoded: a project no other API call named.
    """
    try:
        text = value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        text = value
    return unquote(text) if "%" in text else text


def _project(request: Request, settings: Settings) -> str | None:
    sent = request.headers.get(PROJECT_HEADER)
    project = _header_text(sent) if sent else settings.proxy_default_project
    return canonical_project(project) if project else None


async def _prepare(
    proxy: ProxyState, settings: Settings, request: Request, body: RequestBody | None, raw: bytes
) -> bytes:
    """The body to forward: with our memory block, or the caller's bytes untouched."""
    project = _project(request, settings)
    if body is None or project is None or request.headers.get(INJECT_HEADER, "").lower() == "off":
        return raw
    block = await proxy.memory.block(project, last_user_prompt(body.parsed))
    if not block and not has_memory_block(body.parsed):
        return raw
    return injected(body, raw, block)


async def proxy_call(request: Request, model: str) -> Response:
    """Forward one Gemini call, streaming when the caller asked for a stream."""
    agmem = get_app_state(request)
    settings = agmem.settings
    proxy = get_proxy_state(request)
    _check_token(request, settings)
    url = forwardable_url(settings.gemini_upstream, request.scope)
    raw = await request.body()
    body = parse_body(raw)
    content = await _prepare(proxy, settings, request, body, raw)

    project = _project(request, settings)
    answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    progress = Progress()
    if project is not None and body is not None:
        session_id = request.headers.get(SESSION_HEADER) or None
        capture = CaptureRequest(project, session_id, model, body.parsed)
        proxy.capture.submit(capture, answer, progress)
    response: Response | None = None
    try:
        response = await _forward(
            proxy, settings, request, url, content, answer, model, progress=progress
        )
        return response
    finally:
        # Whatever happened (error, disconnect), capture must not wait for an answer forever;
        # a relayed stream resolves it itself when it ends.
        if not answer.done() and not isinstance(response, _Relay):
            answer.set_result(Answer.nothing())


async def _forward(
    proxy: ProxyState,
    settings: Settings,
    request: Request,
    url: str,
    content: bytes,
    answer: asyncio.Future[Answer],
    model: str,
    *,
    progress: Progress | None = None,
    relay_all: bool = False,
) -> Response:
    upstream_request = proxy.http.build_request(
        request.method, url, headers=request_headers(request.headers), content=content
    )
    try:
        upstream = await _unless_gone(request, proxy.http.send(upstream_request, stream=True))
    except httpx.HTTPError as error:
        log.warning("proxy.upstream_unreachable", model=model, error_type=type(error).__name__)
        raise unreachable(settings, error) from None
    if upstream is None:
        return _caller_gone(model)

    headers = dict(response_headers(upstream.headers))
    streaming = relay_all or request.url.path.endswith(":streamGenerateContent")
    if upstream.status_code < 400 and streaming:
        sse = request.query_params.get("alt") == "sse"
        return _Relay(
            upstream, answer, progress or Progress(), sse=sse, model=model, headers=headers
        )
    try:
        payload = await _unless_gone(request, upstream.aread())
    except httpx.HTTPError as error:
        raise unreachable(settings, error) from None
    finally:
        await upstream.aclose()
    if payload is None:
        return _caller_gone(model)
    if upstream.status_code < 400:
        answer.set_result(Answer(payload, sse=False))
    else:
        log.info("proxy.upstream_error", model=model, status=upstream.status_code)
    return Response(payload, status_code=upstream.status_code, headers=headers)


async def _unless_gone(request: Request, work: Coroutine[Any, Any, _T]) -> _T | None:
    """`work`'s result, or None (`work` cancelled) once the caller closed its connection first.

    The server cancels no request whose caller went away: the proxy waited for Gemini's answer
    (up to AGMEM_PROXY_UPSTREAM_TIMEOUT_SECONDS of thinking the caller's key pays for), and
    capture recorded the calls of a whole one as `pending`, calls the agent never received.
    """
    job = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnect(request.receive))
    try:
        await asyncio.wait((job, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not job.done():
            job.cancel()
    if not job.done():
        await asyncio.wait((job,))  # its cancellation done (a connection released)
        await _discard(job)
        return None
    return job.result()


async def _discard(job: asyncio.Future[Any]) -> None:
    """What a cancelled `job` ended with anyway is nobody's: a response that came regardless
    would hold its upstream connection, and an exception never retrieved is logged by asyncio
    as a fault."""
    if job.cancelled() or job.exception() is not None:
        return
    result = job.result()
    if isinstance(result, httpx.Response):
        await result.aclose()


async def _disconnect(receive: Receive) -> None:
    """Until the caller closes its connection (its body was read: nothing else comes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _caller_gone(model: str) -> Response:
    log.info("proxy.caller_gone", model=model)
    # Nobody reads it: the server drops an answer to a closed connection (nginx's 499).
    return Response(status_code=499)


class _Relay(StreamingResponse):
    """Relays the upstream stream chunk by chunk; capture gets the whole copy at the end."""

    def __init__(
        self,
        upstream: httpx.Response,
        answer: asyncio.Future[Answer],
        progress: Progress,
        *,
        sse: bool,
        model: str,
        headers: dict[str, str],
    ) -> None:
        self.upstream = upstream
        self.answer = answer
        self.progress = progress
        self.sse = sse
        self.model = model
        self.copy = bytearray()
        # Set once the upstream's stream has ended and its last chunk went to the caller.
        self.whole = False
        # Set when the upstream broke off a stream that has no error event (not SSE): the answer
        # is then cut too (`stream_response`).
        self.cut = False
        super().__init__(self._chunks(), status_code=upstream.status_code, headers=headers)

    async def _chunks(self) -> AsyncIterator[bytes]:
        # An SSE event's start, relayed with its end: a stream cut mid-event then leaves none
        # before the error event. Relayed as it came, the half event was closed by the error
        # event's blank line, and google-genai raised on that garbage instead of the error.
        holder = EventHolder()
        try:
            async for chunk in self.upstream.aiter_bytes():
                self.copy += chunk
                self.progress.moved()
                if self.sse:
                    chunk = holder.take(chunk)
                    if not chunk:
                        continue
                yield chunk
                # And once the caller took it: a slow reader holds the next read back.
                self.progress.moved()
            if holder.held:  # an event without its blank line, which the stream's end closes
                yield bytes(holder.held)
            self.whole = True
        except httpx.HTTPError as error:
            log.warning(
                "proxy.upstream_stream_broken", model=self.model, error_type=type(error).__name__
            )
            if self.sse:
                # Headers are already sent, so the status cannot say it. Ending the stream
                # cleanly would hand the caller a cut answer that looks whole; Gemini reports a
                # failure mid-stream as an `error` event, which google-genai raises.
                yield stream_error_event(self.copy[: len(self.copy) - len(holder.held)], error)
            else:
                # A JSON array has no such event: ended cleanly, half an array looked whole
                # (curl's exit 0, where the upstream's own cut is its exit 18).
                self.cut = True

    async def stream_response(self, send: Send) -> None:
        """Starlette's, but a cut stream's answer is left without its end (`abort_answer`)."""
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if not self.cut:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
            if self.cut:
                abort_answer(scope)
        finally:
            # A stream cut short (the upstream broke off, the caller went away) is no answer: the
            # client raised or gave up, so the agent runs none of its calls and asks again. Its
            # calls were recorded as `pending` observations that no result would ever complete.
            if not self.answer.done():
                whole = Answer(bytes(self.copy), sse=self.sse) if self.whole else Answer.nothing()
                self.answer.set_result(whole)
            await self.upstream.aclose()


async def passthrough(request: Request, rest: str) -> Response:
    """Any other Gemini API call (countTokens, embedContent, models, ...): forwarded untouched.

    A client pointed at the proxy makes these too; answering them 404 would break it.
    """
    agmem = get_app_state(request)
    _check_token(request, agmem.settings)
    url = forwardable_url(agmem.settings.gemini_upstream, request.scope)
    content = await request.body()
    unused: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    proxy = get_proxy_state(request)
    return await _forward(
        proxy, agmem.settings, request, url, content, unused, rest, relay_all=True
    )


for _version in GEMINI_API_VERSIONS:
    for _action in ("generateContent", "streamGenerateContent"):
        router.add_api_route(
            f"/{_version}/models/{{model}}:{_action}",
            proxy_call,
            methods=["POST"],
            name=f"gemini_{_version}_{_action}",
            response_class=Response,
        )
# Registered after the routes above, which therefore win for the calls they serve.
for _version in GEMINI_API_VERSIONS:
    router.add_api_route(
        f"/{_version}/{{rest:any}}",
        passthrough,
        # HEAD relayed as HEAD (app/api/middleware.py leaves these paths to this route): a
        # GET resource answers HEAD (RFC 9110, 9.3.2), and the upstream sends no body for it.
        methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
        name=f"gemini_{_version}_passthrough",
        response_class=Response,
        include_in_schema=False,  # a catch-all, not an operation of ours
    )
