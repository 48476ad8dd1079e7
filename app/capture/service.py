"""Capture services: sessions and observations. Called by the HTTP routes and, directly, by the
Gemini proxy. Session first, everything else keyword-only; they flush, the caller commits.

Writes return small frozen references (`SessionRef`, `ObservationRef`) rather than ORM rows, so
the hot path never reads back the payload it just wrote. Reads return ORM rows.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic.alias_generators import to_snake
from sqlalchemy import Row, literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app import exactjson
from app.capture import queries
from app.capture.db import GroupWriter
from app.capture.derive import (
    Payload,
    dumps,
    observation_type,
    prepare_payload,
)
from app.capture.entities import SANITIZE_SCANNER, extract_entities, merge_entities
from app.capture.errors import (
    ObservationIdConflict,
    ObservationNotFound,
    PayloadTooDeep,
    SessionIdConflict,
    SessionNotFound,
)
from app.capture.schemas import ObserveIn, ObserveResultIn, SessionStartIn
from app.config import Settings
from app.db.models import ObservationRow, SessionRow
from app.errors import InvalidJSON, ValidationFailed
from app.exactjson import NumberOutOfRange
from app.privacy import NestingTooDeep, cap_text, clean_text, sanitize_text
from app.projects import EXCLUDED_PREFIX, canonical_project, is_project_excluded

log = structlog.get_logger(__name__)

# The write paths run plain statements, so they take an ORM session (in a caller's transaction),
# a SQLAlchemy connection or the HTTP hot path's group-commit writer alike.
Executor = AsyncSession | AsyncConnection | GroupWriter

EXCLUDED = "excluded"
# Ids minted for sessions of excluded projects carry this prefix, so that later observations
# sent with such an id are recognised as excluded without anything having been stored.


@dataclass(frozen=True, slots=True)
class SessionRef:
    id: str
    project_path: str
    status: str  # active | ending | summarized | failed | excluded
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ObservationRef:
    id: str | None  # None when nothing was stored (excluded project)
    session_id: str
    project_path: str | None
    status: str  # pending | captured | compressed | failed | excluded
    observation_type: str
    original_tokens: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class SessionDetail:
    row: SessionRow
    total_observations: int
    tokens_saved: int
    observation_counts: dict[str, int]


# --- helpers ------------------------------------------------------------------------------------


def _clean_id(value: str, field: str) -> str:
    cleaned = clean_text(value).strip()
    if not cleaned:
        raise ValidationFailed(f"{field}: must not be empty (after removing NUL characters)")
    return cleaned


def _payload(value: Any, field: str, settings: Settings, sent: bytes | None = None) -> Payload:
    """`value` as stored; `sent`, the request's JSON body, is read again for `field` exactly
    when the value holds a float (`prepare_payload`)."""
    try:
        return prepare_payload(
            value,
            max_chars=settings.capture_max_field_chars,
            max_depth=settings.capture_max_depth,
            scanner=SANITIZE_SCANNER,
            exact=_as_sent(sent, field) if sent is not None else None,
        )
    except NestingTooDeep:
        raise PayloadTooDeep(
            f"{field}: nests deeper than {settings.capture_max_depth} levels "
            "(AGMEM_CAPTURE_MAX_DEPTH)"
        ) from None
    except NumberOutOfRange as error:
        raise InvalidJSON(f"{field}: {error}") from None


def _payload_params(session: Executor, name: str, payload: Payload) -> dict[str, Any]:
    """A payload's two statement parameters (`queries._payload`): its JSON text as `name`, or a
    string value's own text as `name_text`. UTF-8 bytes as they are for the capture writer,
    which sends text parameters as bytes anyway; a `str` for SQLAlchemy, which would bind bytes
    as bytea."""
    if isinstance(session, GroupWriter):
        data: str | bytes = payload.data
    else:
        data = payload.value if payload.is_text else payload.data.decode()
    if payload.is_text:
        return {name: None, f"{name}_text": data}
    return {name: data, f"{name}_text": None}


def _epoch_ms(value: int | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value / 1000, tz=UTC)


def _observation_ref(row: Row[Any]) -> ObservationRef:
    return ObservationRef(
        id=row.id,
        session_id=row.session_id,
        project_path=row.project_path,
        status=row.status,
        observation_type=row.observation_type,
        original_tokens=row.original_tokens,
        truncated=row.truncated,
    )


def _excluded(session_id: str, function_name: str, function_args: Any) -> ObservationRef:
    return ObservationRef(
        id=None,
        session_id=session_id,
        project_path=None,
        status=EXCLUDED,
        observation_type=observation_type(function_name, function_args),
        original_tokens=0,
        truncated=False,
    )


def _is_excluded_call(session_id: str, project_path: str | None, settings: Settings) -> bool:
    if session_id.startswith(EXCLUDED_PREFIX):
        return True
    return project_path is not None and is_project_excluded(project_path, settings)


class CallEntities:
    """The entities this process stored with its recent calls, by observation id, so that their
    results merge into them in Python (MATCH_BY_ID_MERGED) instead of in Postgres. Bounded:
    the oldest entry goes first; a result whose call is no longer here is merged in SQL."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: dict[str, tuple[dict[str, list[str]], str]] = {}

    def remember(self, observation_id: str, entities: dict[str, list[str]], dumped: str) -> None:
        entries = self._entries
        if len(entries) >= self.size:
            del entries[next(iter(entries))]
        entries[observation_id] = (entities, dumped)

    def take(self, observation_id: str) -> tuple[dict[str, list[str]], str] | None:
        return self._entries.pop(observation_id, None)


# Results usually follow their call within milliseconds; 4,096 calls awaiting a result cover
# far more concurrent agents than one server serves.
CALL_ENTITIES = CallEntities(4096)


class SessionTouches:
    """When this process last sent each session's activity touch: a touch goes with at most one
    statement per session every TOUCH_SECONDS, the others take the plain form of the statement.

    Postgres set up and ran the touch's UPDATE for every statement that carried it, to update
    nothing in all but one a session every 5 seconds: ~3 µs of its CPU a statement (~2.5%). The
    statement still updates only a time older than TOUCH_SECONDS, so the stored time lags a
    session's latest observation by at most about twice that. With one touch in flight per
    session, two writer lanes do not wait on each other for a session row either. Bounded: the
    session touched longest ago goes first.
    """

    def __init__(self, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.clock = clock
        self._sent: dict[str, float] = {}

    def due(self, session_id: str) -> bool:
        """True (and remembered) when this session's next statement should carry the touch."""
        now = self.clock()
        sent = self._sent
        last = sent.get(session_id)
        if last is not None and now - last < queries.TOUCH_SECONDS:
            return False
        if sent.pop(session_id, None) is None and len(sent) >= self.size:
            del sent[next(iter(sent))]
        sent[session_id] = now
        return True


SESSION_TOUCHES = SessionTouches(4096)


# --- sessions -----------------------------------------------------------------------------------


async def start_session(
    session: AsyncSession, *, data: SessionStartIn, settings: Settings, sent: bytes | None = None
) -> tuple[SessionRef, bool]:
    """Create a session, or return the existing one for a repeated id; (ref, created)."""
    project_path = canonical_project(clean_text(data.project_path))
    if not project_path:
        raise ValidationFailed("projectPath: must not be blank (after removing NUL characters)")
    if is_project_excluded(project_path, settings):
        session_id = _clean_id(data.id, "id") if data.id else EXCLUDED_PREFIX + uuid.uuid4().hex
        log.info("session.excluded", project_path=project_path)
        return SessionRef(session_id, project_path, EXCLUDED, datetime.now(UTC)), False

    session_id = _clean_id(data.id, "id") if data.id else uuid.uuid4().hex
    if session_id.startswith(EXCLUDED_PREFIX):
        # Observations sent with such an id are dropped as excluded; a real session must not
        # carry one, or everything it captured would be lost silently.
        raise ValidationFailed(f"id: ids starting with {EXCLUDED_PREFIX!r} are reserved")
    user_prompt = (
        cap_text(sanitize_text(data.user_prompt), settings.capture_max_field_chars)
        if data.user_prompt is not None
        else None
    )
    # Shown back on every read and in the context block: user text like the prompt. Cut to the
    # column's 200 characters: redaction can lengthen a short secret ("-pab1" -> "-p[REDACTED]").
    created_by = sanitize_text(data.created_by)[:200] if data.created_by is not None else None
    metadata = (
        _payload(data.metadata, "metadata", settings, sent) if data.metadata is not None else None
    )
    params = {
        "id": session_id,
        "project_path": project_path,
        "user_prompt": user_prompt,
        "created_by": created_by,
        "metadata": metadata.json_text if metadata is not None else None,
    }
    row = (await session.execute(queries.INSERT_SESSION, params)).first()
    if row is not None:
        log.info("session.started", session_id=session_id, project_path=project_path)
        return SessionRef(row.id, row.project_path, row.status, row.created_at), True

    existing = (await session.execute(queries.SELECT_SESSION_FOR_COMPARE, {"id": session_id})).one()
    stored_metadata = metadata.value if metadata is not None else None
    same = (
        existing.project_path == project_path
        and existing.user_prompt == user_prompt
        and existing.created_by == created_by
        and exactjson.same_value(existing.metadata, stored_metadata)
    )
    if not same:
        raise SessionIdConflict(
            f"session {session_id!r} already exists with a different body; "
            "reuse an id only to retry the same request"
        )
    return SessionRef(
        existing.id, existing.project_path, existing.status, existing.created_at
    ), False


async def end_session(session: AsyncSession, *, session_id: str) -> SessionRef:
    """Mark a session `ending` (the worker summarises it); repeating it is harmless."""
    session_id = _clean_id(session_id, "sessionId")
    if session_id.startswith(EXCLUDED_PREFIX):
        # Minted by start_session for an excluded project: nothing was stored, nothing to end,
        # and the interceptor's usual closing call is answered like its observations were.
        return SessionRef(session_id, "", EXCLUDED, datetime.now(UTC))
    row = (await session.execute(queries.END_SESSION, {"session_id": session_id})).first()
    if row is None:
        row = (await session.execute(queries.SESSION_STATUS, {"session_id": session_id})).first()
        if row is None:
            raise SessionNotFound(f"no session with id {session_id!r}")
    else:
        log.info("session.ended", session_id=session_id)
    return SessionRef(row.id, row.project_path, row.status, row.created_at)


async def queue_summary(session: AsyncSession, *, session_id: str) -> SessionRef:
    """Queue a session for (re-)summarising by the worker."""
    session_id = _clean_id(session_id, "sessionId")
    row = (await session.execute(queries.QUEUE_SUMMARY, {"session_id": session_id})).first()
    if row is None:
        raise SessionNotFound(f"no session with id {session_id!r}")
    log.info("session.summary_queued", session_id=session_id)
    return SessionRef(row.id, row.project_path, row.status, row.created_at)


async def get_session(session: AsyncSession, *, session_id: str) -> SessionDetail:
    """A session with its observation totals."""
    row = await session.get(SessionRow, clean_text(session_id))
    if row is None:
        raise SessionNotFound(f"no session with id {session_id!r}")
    totals = (await session.execute(queries.SESSION_TOTALS, {"session_id": row.id})).one()
    counts = {name: int(getattr(totals, name)) for name in ("pending", "captured", "compressed")}
    counts["failed"] = int(totals.failed)
    return SessionDetail(row, int(totals.total_observations), int(totals.tokens_saved), counts)


async def list_sessions(
    session: AsyncSession,
    *,
    project_path: str | None = None,
    status: str | None = None,
    limit: int = 50,
    before: datetime | None = None,
    before_id: str | None = None,
) -> list[SessionRow]:
    """Sessions, newest first, optionally of one project and status, created before a time, and
    listed after the session `before_id` (the last of the page before: a keyset on the order's
    (created_at, id)). Paging by `before` alone skipped the sessions created in the same
    millisecond as a page's last one: `createdAt` is in microseconds, an epoch `before` is not,
    and even the exact time leaves sessions that share it."""
    query = select(SessionRow).order_by(SessionRow.created_at.desc(), SessionRow.id.desc())
    if before_id is not None:
        anchor_id = clean_text(before_id)
        anchor = await session.scalar(
            select(SessionRow.created_at).where(SessionRow.id == anchor_id)
        )
        if anchor is None:
            raise ValidationFailed(f"query: 'beforeId' names no session: {anchor_id!r}")
        query = query.where(
            tuple_(SessionRow.created_at, SessionRow.id) < tuple_(literal(anchor), anchor_id)
        )
    # A blank `?projectPath=` is no filter, as an omitted one is (no session has a blank project).
    project = canonical_project(clean_text(project_path)) if project_path is not None else ""
    if project:
        query = query.where(SessionRow.project_path == project)
    if status is not None:
        query = query.where(SessionRow.status == status)
    if before is not None:
        query = query.where(SessionRow.created_at < before)
    return list((await session.scalars(query.limit(limit))).all())


# --- observations -------------------------------------------------------------------------------


def _as_sent(body: bytes, field: str) -> Callable[[], Any]:
    """A reader of the body's `field` (its camelCase name) with every number as written:
    pydantic's and `json`'s parsers made floats of them, and `1e-400` was stored as 0.0, `1.50`
    as 1.5 and `1e-999999` (which the database cannot keep: 400, from the sanitizing) as 0.0."""

    def read() -> Any:
        sent = exactjson.loads(body)  # JSON a parser has read already
        return sent[field] if field in sent else sent[to_snake(field)]  # populate_by_name

    return read


async def record_observation(
    session: Executor, *, data: ObserveIn, settings: Settings, sent: bytes | None = None
) -> tuple[ObservationRef, bool]:
    """Record a tool call as a pending observation; a repeated id returns the first; (ref, created).

    Observations of ended sessions are accepted: a call in flight when the session ended is
    still part of what happened.
    """
    session_id = _clean_id(data.session_id, "sessionId")
    function_name = _clean_id(data.function_name, "functionName")
    if _is_excluded_call(session_id, data.project_path, settings):
        return _excluded(session_id, function_name, data.function_args), False
    args = _payload(data.function_args, "functionArgs", settings, sent)
    observation_id = _clean_id(data.id, "id") if data.id else uuid.uuid4().hex
    entities = extract_entities(args.value, scanned=args.scanned)
    entities_json = dumps(entities)
    params = {
        "id": observation_id,
        "session_id": session_id,
        "function_name": function_name,
        **_payload_params(session, "function_args", args),
        "observation_type": observation_type(function_name, args.value),
        "entities": entities_json,
        "original_tokens": args.original_tokens,
        "args_bytes": args.original_bytes,
        "truncated": args.truncated,
        "observed_at": _epoch_ms(data.timestamp),
    }
    touch = SESSION_TOUCHES.due(session_id)
    row = (await session.execute(queries.INSERT_OBSERVATION.pick(touch), params)).first()
    if row is not None:
        log.debug("observation.recorded", observation_id=observation_id, session_id=session_id)
        CALL_ENTITIES.remember(observation_id, entities, entities_json)
        return _observation_ref(row), True

    existing = (
        await session.execute(queries.SELECT_OBSERVATION_FOR_COMPARE, {"id": observation_id})
    ).first()
    if existing is None:
        raise SessionNotFound(f"no session with id {session_id!r}")
    if (
        existing.session_id != session_id
        or existing.function_name != function_name
        or not exactjson.same_value(existing.function_args, args.value)
    ):
        raise ObservationIdConflict(
            f"observation {observation_id!r} already exists with a different body; "
            "reuse an id only to retry the same request"
        )
    return _observation_ref(existing), False


async def record_result(
    session: Executor, *, data: ObserveResultIn, settings: Settings, sent: bytes | None = None
) -> tuple[ObservationRef, bool]:
    """Attach a tool result to its call, or record it as a new captured observation.

    Matching: by `observation_id`; otherwise the newest pending call of that function in the
    session; otherwise a new observation (created=True). A result is never dropped.
    """
    session_id = _clean_id(data.session_id, "sessionId")
    function_name = _clean_id(data.function_name, "functionName")
    if _is_excluded_call(session_id, data.project_path, settings):
        return _excluded(session_id, function_name, None), False
    result = _payload(data.result, "result", settings, sent)
    found = extract_entities(result.value, scanned=result.scanned)
    entities = dumps(found)
    params: dict[str, Any] = {
        "session_id": session_id,
        "function_name": function_name,
        **_payload_params(session, "result", result),
        "result_bytes": result.original_bytes,
        "result_tokens": result.original_tokens,
        "truncated": result.truncated,
        "entities": entities,
        "result_at": _epoch_ms(data.timestamp),
    }
    observation_id = (
        _clean_id(data.observation_id, "observationId") if data.observation_id else None
    )
    # The first statement carries the touch when it is due; a follow-up statement never needs it
    # (a data-modifying CTE runs whether or not its statement matches).
    touch = SESSION_TOUCHES.due(session_id)
    if observation_id is not None:
        params["observation_id"] = observation_id
        matched = None
        call = CALL_ENTITIES.take(observation_id)
        if call is not None:
            merged = {"merged": dumps(merge_entities(call[0], found)), "call_entities": call[1]}
            statement = queries.MATCH_BY_ID_MERGED.pick(touch)
            matched = (await session.execute(statement, params | merged)).first()
            touch = False
        if matched is None or matched.id is None:
            # No call known here, or it did not match as known: the general statement decides.
            matched = (await session.execute(queries.MATCH_BY_ID.pick(touch), params)).first()
    else:
        statement = queries.MATCH_NEWEST_PENDING.pick(touch)
        matched = (await session.execute(statement, params)).first()
    if matched is None:
        raise SessionNotFound(f"no session with id {session_id!r}")
    if matched.id is not None:
        log.debug("observation.captured", observation_id=matched.id, session_id=session_id)
        return _observation_ref(matched), False

    if observation_id is not None:
        repeat = await _repeated_result(session, params, result)
        if repeat is not None:
            return repeat, False
    new_id = observation_id or uuid.uuid4().hex
    inserted = (
        await session.execute(
            queries.INSERT_CAPTURED.plain,
            {
                **params,
                "id": new_id,
                "observation_type": observation_type(function_name, None),
                "original_tokens": params["result_tokens"],
            },
        )
    ).first()
    if inserted is None:
        # Another request inserted this id between our match and our insert: compare with it.
        repeat = await _repeated_result(session, {**params, "observation_id": new_id}, result)
        if repeat is None:
            raise SessionNotFound(f"no session with id {session_id!r}")
        return repeat, False
    log.debug("observation.result_unmatched", observation_id=new_id, session_id=session_id)
    return _observation_ref(inserted), True


async def _repeated_result(
    session: Executor, params: dict[str, Any], result: Payload
) -> ObservationRef | None:
    """The stored observation when this result repeats its stored one, or the result applied to
    its call if that call has none yet (pending, or compressed early by `POST /api/compress`);
    None if there is no such observation.

    The call can be pending here although the match found nothing: its insert committed in
    another transaction after the match's snapshot was taken (the match does not wait for a row
    it cannot see yet; an insert of the same id does, then finds it). Answering the stored row
    then would drop the result, so the match runs again, now that the call is visible.
    """
    observation_id, session_id = params["observation_id"], params["session_id"]
    existing = (
        await session.execute(queries.SELECT_OBSERVATION_FOR_COMPARE, {"id": observation_id})
    ).first()
    if existing is not None and existing.session_id == session_id and existing.result_at is None:
        # Pending, or compressed early without a result (`POST /api/compress`): it takes this one.
        statement = queries.MATCH_BY_ID_WITHOUT_RESULT.plain
        matched = (await session.execute(statement, params)).first()
        if matched is not None and matched.id is not None:
            return _observation_ref(matched)
        # Another result captured it in between: compare with what it stored.
        existing = (
            await session.execute(queries.SELECT_OBSERVATION_FOR_COMPARE, {"id": observation_id})
        ).first()
    if existing is None:
        return None
    if existing.session_id != session_id:
        raise ObservationIdConflict(f"observation {observation_id!r} belongs to another session")
    if existing.status != "pending" and not exactjson.same_value(existing.result, result.value):
        raise ObservationIdConflict(
            f"observation {observation_id!r} already has a different result"
        )
    return _observation_ref(existing)


async def get_observation(session: AsyncSession, *, observation_id: str) -> ObservationRow:
    """One observation with its raw and compressed data."""
    row = await session.get(ObservationRow, clean_text(observation_id))
    if row is None:
        raise ObservationNotFound(f"no observation with id {observation_id!r}")
    return row


async def queue_compression(session: AsyncSession, *, observation_id: str) -> int:
    """Queue an observation for (re-)compression by the worker; returns its queue position."""
    observation_id = _clean_id(observation_id, "observationId")
    queued = (
        await session.execute(queries.QUEUE_COMPRESSION, {"observation_id": observation_id})
    ).first()
    if queued is None:
        raise ObservationNotFound(f"no observation with id {observation_id!r}")
    log.info("observation.compression_queued", observation_id=observation_id)
    return int(queued.position)


__all__ = [
    "EXCLUDED",
    "ObservationRef",
    "SessionDetail",
    "SessionRef",
    "end_session",
    "get_observation",
    "get_session",
    "is_project_excluded",
    "list_sessions",
    "queue_compression",
    "queue_summary",
    "record_observation",
    "record_result",
    "start_session",
]
