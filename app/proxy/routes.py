"""The Gemini-compatible routes: `/v1beta|v1/models/{model}:generateContent|streamGenerateContent`.

Each call: build the project's memory block and put it in `systemInstruction`, forward to the
upstream with the caller's own key, relay the answer as it arrives, and hand a copy to capture,
which runs in the background and can never fail the call.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from app.api.deps import get_state
from app.config import Settings
from app.errors import Unauthorized
from app.proxy.capture import Answer, CaptureRequest, submit_capture
from app.proxy.forward import request_headers, response_headers, unreachable, upstream_url
from app.proxy.inject import has_memory_block, inject_memory, last_user_prompt
from app.proxy.state import ProxyState, get_proxy_state, proxy_lifespan

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


def _parse_body(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def _memory_block(proxy: ProxyState, settings: Settings, project: str, prompt: str) -> str:
    """The project's memory block, or "" when it cannot be had within the latency budget."""
    try:
        return await asyncio.wait_for(
            proxy.context(project, prompt, settings.proxy_context_budget),
            timeout=settings.proxy_context_timeout_ms / 1000,
        )
    except TimeoutError:
        log.warning(
            "proxy.context_slow", project=project, budget_ms=settings.proxy_context_timeout_ms
        )
    except Exception as error:
        # Memory is a bonus: without it the call still goes through, as if injection were off.
        log.warning("proxy.context_failed", project=project, error_type=type(error).__name__)
    return ""


async def _prepare(
    proxy: ProxyState, settings: Settings, request: Request, body: dict[str, Any] | None, raw: bytes
) -> bytes:
    """The body to forward: with our memory block, or the caller's bytes untouched."""
    project = request.headers.get(PROJECT_HEADER) or settings.proxy_default_project
    if body is None or project is None or request.headers.get(INJECT_HEADER, "").lower() == "off":
        return raw
    block = await _memory_block(proxy, settings, project, last_user_prompt(body))
    if not block and not has_memory_block(body):
        return raw
    return json.dumps(inject_memory(body, block), ensure_ascii=False).encode()


async def proxy_call(request: Request, model: str) -> Response:
    """Forward one Gemini call, streaming when the caller asked for a stream."""
    agmem = get_state(request)
    settings = agmem.settings
    proxy = get_proxy_state(request)
    _check_token(request, settings)
    raw = await request.body()
    body = _parse_body(raw)
    content = await _prepare(proxy, settings, request, body, raw)

    project = request.headers.get(PROJECT_HEADER) or settings.proxy_default_project
    answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    if project is not None and body is not None:
        submit_capture(
            proxy.jobs,
            agmem,
            CaptureRequest(
                project=project,
                session_id=request.headers.get(SESSION_HEADER) or None,
                model=model,
                body=body,
            ),
            answer,
        )

    upstream_request = proxy.http.build_request(
        "POST",
        upstream_url(settings.gemini_upstream, request.url.path, request.scope["query_string"]),
        headers=request_headers(request.headers),
        content=content,
    )
    try:
        upstream = await proxy.http.send(upstream_request, stream=True)
    except httpx.HTTPError as error:
        answer.set_result(Answer.nothing())
        log.warning("proxy.upstream_unreachable", model=model, error_type=type(error).__name__)
        raise unreachable(settings.gemini_upstream, error) from None

    headers = response_headers(upstream.headers)
    streaming = request.url.path.endswith(":streamGenerateContent")
    if upstream.status_code >= 400 or not streaming:
        try:
            payload = await upstream.aread()
        except httpx.HTTPError as error:
            answer.set_result(Answer.nothing())
            raise unreachable(settings.gemini_upstream, error) from None
        finally:
            await upstream.aclose()
        ok = upstream.status_code < 400
        answer.set_result(Answer(payload, sse=False) if ok else Answer.nothing())
        if not ok:
            log.info("proxy.upstream_error", model=model, status=upstream.status_code)
        return Response(payload, status_code=upstream.status_code, headers=dict(headers))

    sse = request.query_params.get("alt") == "sse"
    return StreamingResponse(
        _relay(upstream, answer, sse=sse, model=model),
        status_code=upstream.status_code,
        headers=dict(headers),
    )


async def _relay(
    upstream: httpx.Response, answer: asyncio.Future[Answer], *, sse: bool, model: str
) -> AsyncIterator[bytes]:
    """Each chunk goes to the caller as it arrives; capture gets the whole copy at the end."""
    copy = bytearray()
    try:
        async for chunk in upstream.aiter_bytes():
            copy += chunk
            yield chunk
    except httpx.HTTPError as error:
        # Headers are already sent: the caller sees the stream end early, as from Google itself.
        log.warning("proxy.upstream_stream_broken", model=model, error_type=type(error).__name__)
    finally:
        if not answer.done():
            answer.set_result(Answer(bytes(copy), sse=sse))
        await upstream.aclose()


for _version in ("v1beta", "v1"):
    for _action in ("generateContent", "streamGenerateContent"):
        router.add_api_route(
            f"/{_version}/models/{{model}}:{_action}",
            proxy_call,
            methods=["POST"],
            name=f"gemini_{_version}_{_action}",
            response_class=Response,
        )
