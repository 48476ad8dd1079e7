"""Recording a proxied call through the capture service: its session, tool results and calls.

Each step is its own short transaction on the app's pool, run by a background job.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import structlog
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.capture.errors import SessionIdConflict
from app.capture.schemas import ObserveIn, ObserveResultIn, SessionStartIn
from app.capture.service import end_session, record_observation, record_result, start_session
from app.errors import AppError
from app.proxy.calls import FunctionCall, FunctionResult, match_results, observation_ids
from app.proxy.sessions import (
    PROXY_CREATOR,
    holders_of,
    idle_sessions,
    lock_project,
    recent_sessions,
    reusable_session,
    touch_session,
)
from app.state import AppState

# Sessions named by the caller (X-Agmem-Session) are the caller's to end; they are never reused
# for other calls nor ended for idleness, so they carry a different creator.
CALLER_NAMED_CREATOR = "gemini-proxy:caller"

log = structlog.get_logger(__name__)

_PROJECT_OF = text("SELECT project_path FROM sessions WHERE id = :id")

# How many of a project's latest proxy sessions are searched for the calls a request's results
# answer (`session_of_calls`).
_SESSIONS_SEARCHED = 5

# A batch's skip line names this many of its refusals and functions at most.
_NAMED_IN_LOG = 10


@dataclass(slots=True)
class Batch:
    """The calls of an answer, or the results of a request, as recorded: each in a savepoint of
    its own, so that one the capture refuses (a name over 300 characters, a NaN, arguments
    nested too deep, a session deleted meanwhile) is skipped and the others are kept."""

    what: str
    session_id: str
    captured: int = 0
    skipped_functions: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.skipped_functions)

    @asynccontextmanager
    async def item(self, db: AsyncSession, name: str) -> AsyncIterator[None]:
        try:
            async with db.begin_nested():
                yield
        except (AppError, ValidationError) as error:
            self.skipped_functions.append(name[:100])
            self.refusals.append(f"{type(error).__name__}: {str(error)[:300]}")
        else:
            self.captured += 1

    def log_skipped(self) -> None:
        """One line for the batch, not one per item: a batch for a deleted session logged as
        many lines as it had calls, each saying the same."""
        if not self.skipped:
            return
        log.warning(
            "proxy.capture_skipped",
            what=self.what,
            session_id=self.session_id,
            captured=self.captured,
            skipped=self.skipped,
            functions=list(dict.fromkeys(self.skipped_functions))[:_NAMED_IN_LOG],
            errors=list(dict.fromkeys(self.refusals))[:_NAMED_IN_LOG],
        )


async def resolve_session(
    agmem: AppState, *, project: str, session_id: str | None, prompt: str
) -> str:
    """The session for a call: the caller's (opened if new), else the project's proxy session."""
    settings = agmem.settings
    async with agmem.sessionmaker() as db, db.begin():
        if session_id is not None:
            owner = (await db.execute(_PROJECT_OF, {"id": session_id})).scalar_one_or_none()
            if owner is not None and owner != project:
                # A client that sends one id (`main`) for every project would otherwise file one
                # project's tool calls in another's session: capture fails, the call goes on.
                raise SessionIdConflict(
                    f"session {session_id!r} belongs to project {owner!r}, not {project!r}; "
                    "send one X-Agmem-Session per project"
                )
            if owner is None:
                data = SessionStartIn(
                    project_path=project,
                    id=session_id,
                    user_prompt=prompt or None,
                    created_by=CALLER_NAMED_CREATOR,
                )
                await start_session(db, data=data, settings=settings)
            await touch_session(db, session_id=session_id)
            return session_id
        await lock_project(db, project=project)
        idle_s = settings.proxy_session_idle_seconds
        found = await reusable_session(db, project=project, idle_s=idle_s)
        if found is not None:
            await touch_session(db, session_id=found)
            return found
        for stale in await idle_sessions(db, idle_s=idle_s, project=project):
            await end_session(db, session_id=stale)
        data = SessionStartIn(
            project_path=project, user_prompt=prompt or None, created_by=PROXY_CREATOR
        )
        ref, _ = await start_session(db, data=data, settings=settings)
        return ref.id


async def session_of_calls(
    agmem: AppState,
    *,
    project: str,
    answered: tuple[int, list[FunctionCall]],
    conversation: str,
    current: str | None = None,
) -> str | None:
    """The proxy session that recorded the calls a request's results answer, if one of the
    project's latest did: `current` (the session this process last resolved for the
    conversation) is tried first, the common case's one query, then the latest five.

    A conversation's results can come after its session was ended: the user approved a tool
    call past `AGMEM_PROXY_SESSION_IDLE_SECONDS` (Gemini CLI waits for an approval for good).
    Resolved as a new call's session is, they went to the project's next session, where they
    matched no call: the call stayed without a result (given up on) and its result was
    recorded apart, as a call without arguments. In the calls' session, each attaches to its
    call as a late result does (docs/worker.md, "A call without its result")."""
    index, calls = answered
    if not calls:
        return None
    if current is not None:
        # The calls are nearly always the current session's (a tool loop's next turn): it was
        # two queries (the latest sessions, then their holders) and a transaction on every turn.
        first_id = observation_ids(current, index, calls, conversation=conversation)[0]
        async with agmem.sessionmaker() as db:
            if await holders_of(db, observation_ids=[first_id]):
                return current
    async with agmem.sessionmaker() as db, db.begin():
        candidates = await recent_sessions(db, project=project, limit=_SESSIONS_SEARCHED)
        if not candidates:
            return None
        first_ids = [
            observation_ids(candidate, index, calls, conversation=conversation)[0]
            for candidate in candidates
        ]
        holders = await holders_of(db, observation_ids=first_ids)
    # The newest: a conversation begun again with the same words has the same ids in each.
    return next((candidate for candidate in candidates if candidate in holders), None)


async def record_results(
    agmem: AppState,
    *,
    session_id: str,
    results: list[FunctionResult],
    answered: tuple[int, list[FunctionCall]] | None,
    conversation: str,
) -> Batch:
    """Attach each tool result to the call it answers (see `observation_ids`)."""
    if answered is not None:
        index, calls = answered
        ids = observation_ids(session_id, index, calls, conversation=conversation)
        matched = match_results(results, calls, ids)
    else:
        matched = [None] * len(results)
    batch = Batch("result", session_id)
    async with agmem.sessionmaker() as db, db.begin():
        for result, observation_id in zip(results, matched, strict=True):
            async with batch.item(db, result.name):
                data = ObserveResultIn(
                    session_id=session_id,
                    function_name=result.name,
                    result=result.result,
                    observation_id=observation_id,
                )
                await record_result(db, data=data, settings=agmem.settings)
    batch.log_skipped()
    return batch


async def record_calls(
    agmem: AppState,
    *,
    session_id: str,
    turn_index: int,
    calls: list[FunctionCall],
    conversation: str,
) -> Batch:
    """Record each tool call of an answer as a pending observation."""
    ids = observation_ids(session_id, turn_index, calls, conversation=conversation)
    batch = Batch("call", session_id)
    async with agmem.sessionmaker() as db, db.begin():
        for call, observation_id in zip(calls, ids, strict=True):
            async with batch.item(db, call.name):
                data = ObserveIn(
                    session_id=session_id,
                    function_name=call.name,
                    function_args=call.args,
                    id=observation_id,
                )
                await record_observation(db, data=data, settings=agmem.settings)
    batch.log_skipped()
    return batch


async def end_idle_sessions(agmem: AppState) -> int:
    """End the proxy-opened sessions idle past the window, in every project."""
    ended = 0
    async with agmem.sessionmaker() as db, db.begin():
        idle_s = agmem.settings.proxy_session_idle_seconds
        for stale in await idle_sessions(db, idle_s=idle_s):
            await end_session(db, session_id=stale)
            ended += 1
    return ended
