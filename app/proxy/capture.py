"""Capture of a proxied call: its tool results now, its answer's tool calls once it has ended.

Everything here runs as a background job (see `queue.py`) in its own transactions, after or
alongside the relay; a failure is logged and the caller never sees it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from app.capture.service import is_project_excluded
from app.proxy.calls import (
    CallCollector,
    FunctionCall,
    answered_turn,
    next_turn_index,
    trailing_results,
)
from app.proxy.inject import last_user_prompt
from app.proxy.queue import OrderedJobs
from app.proxy.record import record_calls, record_results, resolve_session
from app.proxy.sse import SseReader, parse_json_array_stream
from app.state import AppState

# How long a capture job waits for its answer beyond the upstream timeout before giving up.
_ANSWER_GRACE_S = 60.0


@dataclass(slots=True, frozen=True)
class Answer:
    """The bytes the caller received, for finding the answer's tool calls afterwards."""

    payload: bytes
    sse: bool

    @classmethod
    def nothing(cls) -> Answer:
        return cls(b"", sse=False)

    def function_calls(self) -> list[FunctionCall]:
        """Every `functionCall` part, in order, merged across stream chunks."""
        if not self.payload:
            return []
        if self.sse:
            reader = SseReader()
            responses = reader.feed(self.payload) + reader.close()
        else:
            responses = parse_json_array_stream(self.payload)
        collector = CallCollector()
        for response in responses:
            collector.add_response(response)
        return collector.calls


@dataclass(slots=True, frozen=True)
class CaptureRequest:
    project: str
    session_id: str | None
    model: str
    body: dict[str, Any]


def submit_capture(
    jobs: OrderedJobs, agmem: AppState, request: CaptureRequest, answer: asyncio.Future[Answer]
) -> None:
    """Queue the capture of one call behind the earlier calls of the same conversation."""
    timeout = agmem.settings.proxy_upstream_timeout_seconds + _ANSWER_GRACE_S
    if is_project_excluded(request.project, agmem.settings):
        return

    async def job() -> None:
        body = request.body
        session_id = await resolve_session(
            agmem,
            project=request.project,
            session_id=request.session_id,
            prompt=last_user_prompt(body),
        )
        results = trailing_results(body)
        if results:
            await record_results(
                agmem, session_id=session_id, results=results, answered=answered_turn(body)
            )
        finished = await asyncio.wait_for(asyncio.shield(answer), timeout=timeout)
        calls = finished.function_calls()
        if calls:
            await record_calls(
                agmem, session_id=session_id, turn_index=next_turn_index(body), calls=calls
            )

    jobs.submit(f"{request.project}\x00{request.session_id or ''}", job)
