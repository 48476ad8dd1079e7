"""What an upstream call cancelled for a caller that left ends with anyway is disposed of."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import httpx
from starlette.requests import Request
from starlette.types import Message

from app.proxy.routes import _unless_gone


async def _gone() -> Message:
    return {"type": "http.disconnect"}


def _left_request() -> Request:
    return Request({"type": "http", "method": "POST", "headers": []}, _gone)


def test_a_response_that_came_despite_the_cancel_is_closed() -> None:
    # rev-proxy28: it was dropped open, its upstream connection held until collected.
    response = httpx.Response(200, stream=httpx.ByteStream(b"[]"))

    async def send() -> httpx.Response:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass  # the answer came as the cancel did
        return response

    assert asyncio.run(_unless_gone(_left_request(), send())) is None
    assert response.is_closed


def test_an_error_that_came_despite_the_cancel_is_not_logged_as_a_fault() -> None:
    # rev-proxy28: never retrieved, asyncio logged "Task exception was never retrieved".
    faults: list[dict[str, Any]] = []

    async def send() -> httpx.Response:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise httpx.ConnectError("refused as the caller left") from None
        raise AssertionError("not cancelled")

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: faults.append(ctx))
        assert await _unless_gone(_left_request(), send()) is None
        gc.collect()  # the task's finalizer reports an exception never retrieved

    asyncio.run(run())
    assert faults == []
