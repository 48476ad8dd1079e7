"""Calls whose result never came, and sessions nobody ended: the worker stops waiting for them.

An observation waits `pending` for its result. When none comes (the agent was killed, the
interceptor lost the response, a stream was cut, the IDE crashed) it would wait for good: never
compressed, so out of search, context and its session's summary, and counted in
`awaitingResult` forever. A call is given up on

- when its session is about to be summarised, once `AGMEM_WORKER_RESULT_GRACE_SECONDS` have
  passed since the session ended and since the call was recorded (a result may be in flight
  at the end: the interceptor sends the end right after the last result);
- in any session, ended or not, once it is `AGMEM_WORKER_RESULT_TIMEOUT_SECONDS` old.

Given up on, it becomes `captured` with no result (`result_at` stays NULL): the worker
compresses it as a call whose result was not recorded. It is no longer `pending`, so a later
result sent without `observationId` does not match it (a new observation is recorded, as for
any unmatched result); one sent with its id still attaches to it (capture's
MATCH_BY_ID_WITHOUT_RESULT), is compressed again and its session summarised again.

A session nobody ends (the IDE crashed, the laptop was closed for good, an interceptor with no
end hook) stayed `active`: never summarised, so never among a context block's previous sessions.
Once it has been idle for `AGMEM_WORKER_SESSION_IDLE_SECONDS` the worker ends it as its client
would have, at its last activity; so is a session summarised before its end (a checkpoint) that
was at work again since and went idle. A call after that is captured as ever, and a later end
has the session summarised again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

# What giving up sets: due for compression now, with fresh attempts and no claim.
_GIVE_UP = (
    "UPDATE observations o SET status = 'captured', next_attempt_at = now(), attempts = 0, "
    "locked_until = NULL, locked_by = NULL"
)

# Each pending call of the session recorded by its end is due to be given up `:grace` seconds
# after the later of the end (its last activity if it has no end time) and its own recording;
# those due are given up, and the statement says how long until the next of the others is (NULL:
# none left). A call recorded after the end (the agent went on in an ended session) is left to
# the timeout below: it may be a build that runs for minutes. The due calls are locked oldest
# first, so a result sent by name that skips a locked call (capture's match takes the newest
# pending call it can lock) meets the newest last: it takes it, or finds none and is recorded as
# a new observation, never an older call's. The UPDATE re-checks `status = 'pending'` on the
# row's latest version if a result took its lock first, so a result in flight either lands first
# (the call is captured with it) or after (it attaches by id to the given-up call).
_GIVE_UP_IN_SESSION = text(
    "WITH s AS (SELECT id, coalesce(ended_at, last_activity_at) AS ended FROM sessions "
    "WHERE id = :id), "
    "open AS (SELECT o.id, greatest(o.created_at, s.ended) + make_interval(secs => :grace) AS due "
    "FROM observations o JOIN s ON o.session_id = s.id WHERE o.status = 'pending' "
    "AND o.created_at <= s.ended), "
    "due AS (SELECT o.id FROM observations o JOIN open ON o.id = open.id "
    "WHERE open.due <= now() AND o.status = 'pending' ORDER BY o.seq FOR UPDATE OF o), "
    f"closed AS ({_GIVE_UP} FROM due WHERE o.id = due.id AND o.status = 'pending' "
    "RETURNING o.id) "
    "SELECT (SELECT count(*) FROM closed) AS closed, "
    "(SELECT extract(epoch FROM min(due) - now()) FROM open WHERE due > now()) AS wait"
)


@dataclass(frozen=True, slots=True)
class GivenUp:
    closed: int  # calls given up on now
    wait: float | None  # seconds until the next of the session's other pending calls is due


async def give_up_in_session(session: AsyncSession, *, session_id: str, grace: float) -> GivenUp:
    """Give up on the session's pending calls whose grace has passed."""
    row = (await session.execute(_GIVE_UP_IN_SESSION, {"id": session_id, "grace": grace})).one()
    return GivenUp(int(row.closed), None if row.wait is None else float(row.wait))


# Locked oldest first, as above.
_GIVE_UP_TIMED_OUT = text(
    "WITH due AS (SELECT id FROM observations WHERE status = 'pending' "
    "AND created_at <= now() - make_interval(secs => :timeout) ORDER BY seq FOR UPDATE) "
    f"{_GIVE_UP} FROM due WHERE o.id = due.id AND o.status = 'pending'"
)


async def give_up_timed_out(session: AsyncSession, *, timeout: float) -> int:
    """Give up on every call pending for longer than `timeout` seconds, in any session."""
    result: Any = await session.execute(_GIVE_UP_TIMED_OUT, {"timeout": timeout})
    return int(result.rowcount or 0)


# Idle for `:idle` seconds, and nobody ended it. `last_activity_at > summarized_at`: at work
# again since a checkpoint's summary (a column test, where looking for newer observations would
# probe every summarised session each minute).
_IDLE = (
    "s.last_activity_at <= now() - make_interval(secs => :idle) AND (s.status = 'active' "
    "OR (s.status = 'summarized' AND s.last_activity_at > s.summarized_at))"
)

# Ended at its last call's recording if that is later than its last activity (the touch lags a
# call by up to 5 s), so every call it holds counts as recorded by its end. With a `:limit`, the
# most recently active first, only as many as keep `:limit` sessions waiting for their summary
# (a pass does not add to a queue Gemini has not worked off), the n-th due `(n - 1) * :spacing`
# seconds from now; the sessions after them are ended by the next passes. The idle condition is
# checked again on the row itself, which another worker's upkeep may have ended meanwhile.
_END_IDLE = text(
    f"WITH idle AS (SELECT s.id, row_number() OVER (ORDER BY s.last_activity_at DESC, s.id) AS n "
    f"FROM sessions s WHERE {_IDLE} ORDER BY s.last_activity_at DESC, s.id "
    "LIMIT CASE WHEN CAST(:limit AS integer) IS NOT NULL THEN greatest(0, CAST(:limit AS integer) "
    "- (SELECT count(*) FROM sessions WHERE status = 'ending')) END) "
    "UPDATE sessions s SET status = 'ending', ended_at = greatest(s.last_activity_at, "
    "(SELECT max(o.created_at) FROM observations o WHERE o.session_id = s.id)), "
    "next_attempt_at = now() + make_interval(secs => :spacing * (idle.n - 1)), attempts = 0, "
    "last_error = NULL, locked_until = NULL, locked_by = NULL "
    f"FROM idle WHERE s.id = idle.id AND {_IDLE}"
)


async def end_idle_sessions(
    session: AsyncSession, *, idle: float, limit: int | None = None, spacing: float = 0.0
) -> int:
    """End the sessions idle for longer than `idle` seconds that nobody ended, as many as keep
    at most `limit` sessions waiting for their summary, due `spacing` seconds apart; how many."""
    result: Any = await session.execute(
        _END_IDLE, {"idle": idle, "limit": limit, "spacing": spacing}
    )
    return int(result.rowcount or 0)
