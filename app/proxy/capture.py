"""Capture of a proxied call: its tool results now, its answer's tool calls once it has ended.

Everything here runs as a background job (see `queue.py`) in its own transactions, after or
alongside the relay; a failure is logged and the caller never sees it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import structlog

from app.capture.service import is_project_excluded
from app.proxy.calls import (
    CallCollector,
    FunctionCall,
    answered_turn,
    conversation_key,
    next_turn_index,
    trailing_results,
)
from app.proxy.inject import last_user_prompt
from app.proxy.queue import OrderedJobs
from app.proxy.record import (
    Batch,
    record_calls,
    record_results,
    resolve_session,
    session_of_calls,
)
from app.proxy.sse import SseReader, parse_json_array_stream
from app.state import AppState

log = structlog.get_logger(__name__)

# How long a capture job waits for its answer beyond the upstream timeout, counted from the
# relay's last chunk, before giving up.
_ANSWER_GRACE_S = 60.0
# However its chunks keep coming, a job waits at most this many of those idle bounds from the
# request (24 minutes by default): the jobs of a project's calls without X-Agmem-Session share
# one queue, so a stream that never ends held every later capture of the project, each with its
# request's body, for as long as it went on.
_ANSWER_CEILING_BOUNDS = 4
_SESSION_MEMO_S = 5.0
_MAX_MEMO = 10_000


@dataclass(slots=True, frozen=True)
class Answer:
    """The bytes the caller received, for finding the answer's tool calls afterwards."""

    payload: bytes
    sse: bool
    # False when the upstream gave no answer (an error status, unreachable, the call cut short
    # before it): such a call opens no session.
    received: bool = True

    @classmethod
    def nothing(cls) -> Answer:
        return cls(b"", sse=False, received=False)

    def function_calls(self) -> list[FunctionCall] | None:
        """Every `functionCall` part, in order, merged across stream chunks; None when the
        client raised on the answer instead of reading it: it carries an `error` (Gemini's
        report of a failure mid-stream) or something that is not JSON (a gateway's HTML page).
        None of its calls will run, and the agent asks again."""
        if not self.payload:
            return []
        responses: list[Any] | None
        if self.sse:
            reader = SseReader()
            responses = reader.feed(self.payload) + reader.close()
            if reader.malformed:
                return None
        else:
            responses = parse_json_array_stream(self.payload)
        if responses is None:
            return None
        collector = CallCollector()
        for response in responses:
            if isinstance(response, dict) and "error" in response:
                return None
            collector.add_response(response)
        return collector.calls


class Progress:
    """When the call's answer last moved: its request came, or a chunk of its stream was
    relayed. The upstream timeout bounds each read, not the answer: a long generation streams
    for minutes (Gemini's 65k output tokens), and capture gave up on it at the timeout plus its
    grace from the request, so the calls of its last chunks, which the agent ran, were lost."""

    __slots__ = ("at", "started")

    def __init__(self) -> None:
        self.started = self.at = time.monotonic()

    def moved(self) -> None:
        self.at = time.monotonic()


async def answer_within(
    answer: asyncio.Future[Answer], progress: Progress, idle_s: float, ceiling_s: float
) -> Answer:
    """`answer` once it is set; TimeoutError when it has not moved for `idle_s` seconds (a
    relay that never ended) or `ceiling_s` have passed since the request (a stream that goes
    on for good): the future is left as it is."""
    while not answer.done():
        deadline = min(progress.at + idle_s, progress.started + ceiling_s)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        await asyncio.wait({answer}, timeout=left)
    return answer.result()


@dataclass(slots=True, frozen=True)
class CaptureRequest:
    project: str
    session_id: str | None
    model: str
    body: dict[str, Any]


class Capturer:
    """Queues each call's capture behind the earlier calls of its conversation."""

    def __init__(self, agmem: AppState) -> None:
        self.agmem = agmem
        self.jobs = OrderedJobs()
        # Which session a conversation resolved to, and when: asking the database on every call
        # would put a locked transaction behind each one for an answer that rarely changes.
        self._sessions: dict[str, tuple[str, float]] = {}

    def submit(
        self, request: CaptureRequest, answer: asyncio.Future[Answer], progress: Progress
    ) -> None:
        """Record the call's tool results now and its answer's tool calls once it has ended."""
        if is_project_excluded(request.project, self.agmem.settings):
            return
        timeout = self.agmem.settings.proxy_upstream_timeout_seconds + _ANSWER_GRACE_S
        key = f"{request.project}\x00{request.session_id or ''}"

        async def job() -> None:
            body = request.body
            # The session is opened for a call that carries tool results (they happened, whatever
            # the upstream does next) or once the upstream has answered: a conversation whose
            # first call failed (a 502, a wrong key) used to leave an empty session behind, which
            # the idle sweep then ended and queued for a summary of no work.
            session_id: str | None = None
            results = trailing_results(body)
            results_session: str | None = None
            result_batch: Batch | None = None
            call_batch: Batch | None = None
            if results:
                answered = answered_turn(body)
                conversation = conversation_key(body, answered[0] if answered else 0)
                # The session of the calls they answer, when an earlier one holds them.
                calls_session: str | None = None
                if request.session_id is None and answered is not None:
                    calls_session = await session_of_calls(
                        self.agmem,
                        project=request.project,
                        answered=answered,
                        conversation=conversation,
                        current=self._recent_session(key),
                    )
                if calls_session is None:
                    session_id = calls_session = await self._session(key, request)
                # Else the answer's calls go to the current session, as a new call's do, once
                # the upstream has answered.
                results_session = calls_session
                result_batch = await record_results(
                    self.agmem,
                    session_id=calls_session,
                    results=results,
                    answered=answered,
                    conversation=conversation,
                )
            finished = await answer_within(
                answer, progress, timeout, timeout * _ANSWER_CEILING_BOUNDS
            )
            calls = finished.function_calls() if finished.received else None
            if calls is None:
                log.info("proxy.no_answer", model=request.model, results=len(results))
                return
            # Results that went to their calls' earlier session leave a text-only answer
            # nothing to record: a session opened for it held no work, and was summarised as
            # "made no tool calls".
            if session_id is None and (calls or not results):
                session_id = await self._session(key, request)
            if calls and session_id is not None:
                turn_index = next_turn_index(body)
                call_batch = await record_calls(
                    self.agmem,
                    session_id=session_id,
                    turn_index=turn_index,
                    calls=calls,
                    conversation=conversation_key(body, turn_index),
                )
            kept_calls = call_batch.captured if call_batch else 0
            kept_results = result_batch.captured if result_batch else 0
            if kept_calls or kept_results:
                # What was kept: the skipped items have their batch's own line.
                log.debug(
                    "proxy.captured",
                    session_id=session_id or results_session,
                    model=request.model,
                    calls=kept_calls,
                    results=kept_results,
                    skipped=sum(batch.skipped for batch in (call_batch, result_batch) if batch),
                )

        self.jobs.submit(key, job)

    def _recent_session(self, key: str) -> str | None:
        """The session the conversation resolved to within the idle window: still the project's
        newest proxy session, unless another process opened one since (then the latest five are
        searched, as when none is remembered)."""
        memo = self._sessions.get(key)
        idle_s = self.agmem.settings.proxy_session_idle_seconds
        if memo is None or time.monotonic() - memo[1] >= idle_s:
            return None
        return memo[0]

    async def _session(self, key: str, request: CaptureRequest) -> str:
        settings = self.agmem.settings
        # Re-resolve well inside the idle window, so the session's activity stays current.
        fresh_s = min(_SESSION_MEMO_S, settings.proxy_session_idle_seconds / 4)
        now = time.monotonic()
        memo = self._sessions.get(key)
        if memo is not None and now - memo[1] < fresh_s:
            return memo[0]
        session_id = await resolve_session(
            self.agmem,
            project=request.project,
            session_id=request.session_id,
            prompt=last_user_prompt(request.body),
        )
        self._sessions[key] = (session_id, now)
        if len(self._sessions) > _MAX_MEMO:
            self._sessions = {k: v for k, v in self._sessions.items() if now - v[1] < fresh_s}
        return session_id
