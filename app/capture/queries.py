"""All capture SQL, one statement per operation, each shaped to need one round trip.

The hot statements are raw `text()`: they run on every tool call, and a CTE does in one trip what
the ORM would do in three (check the session, touch it, insert). JSON arrives already serialized
and is cast to jsonb in SQL, so it is encoded exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import TextClause, text

from app.capture.entities import MAX_PER_KIND

# A session's last_activity_at is touched at most every few seconds: the touch is an UPDATE, and
# an UPDATE per observation would queue concurrent observations of one session on its row lock.
TOUCH_SECONDS = 5

# Where a hot statement's session CTEs go (see `_touching`).
_SESSION = "/* session */"
_SESSION_ONLY = "s AS (SELECT id, project_path, status FROM sessions WHERE id = :session_id)"
_TOUCH = f""",
    touch AS (
        UPDATE sessions SET last_activity_at = now()
        WHERE id = :session_id AND last_activity_at < now() - interval '{TOUCH_SECONDS} seconds'
    )
"""


@dataclass(frozen=True, slots=True)
class Touching:
    """A hot statement in two forms: with the touch of its session's activity time, and without.

    The touch is a data-modifying CTE, which Postgres sets up and runs for every statement that
    carries it, whether or not it updates anything; the service sends it with one statement per
    session every TOUCH_SECONDS (`service.SessionTouches`), the plain form otherwise.
    """

    plain: TextClause
    touching: TextClause

    def pick(self, touch: bool) -> TextClause:
        return self.touching if touch else self.plain


def _touching(sql: str) -> Touching:
    return Touching(
        plain=text(sql.replace(_SESSION, _SESSION_ONLY)),
        touching=text(sql.replace(_SESSION, _SESSION_ONLY + _TOUCH)),
    )


def _payload(name: str) -> str:
    """A payload parameter as jsonb: `:name` is JSON text, or NULL and `:name_text` a string
    value's own text, which becomes a JSON string here (no JSON escaping in the server, no JSON
    parsing in Postgres; `service._payload_params`)."""
    return f"coalesce(CAST(:{name} AS jsonb), to_jsonb(CAST(:{name}_text AS text)))"


INSERT_SESSION = text(
    """
    INSERT INTO sessions (id, project_path, user_prompt, created_by, metadata)
    VALUES (:id, :project_path, :user_prompt, :created_by, CAST(:metadata AS jsonb))
    ON CONFLICT (id) DO NOTHING
    RETURNING id, project_path, status, created_at
    """
)

SELECT_SESSION_FOR_COMPARE = text(
    """
    SELECT id, project_path, status, created_at, user_prompt, created_by, metadata
    FROM sessions WHERE id = :id
    """
)

# An active session ends. So does a summarised one (or one whose summary failed) that recorded
# calls or results since its summary: `POST /api/summarize` of a session still at work (a
# checkpoint) left it `summarized`, and its end was then a no-op, so the work after the
# checkpoint never reached a summary. Ending again with nothing new stays harmless. A session
# nobody has ended (no `ended_at`: a checkpoint, queued, summarised or failed) always ends: the
# end is what lets the worker give up on its calls still waiting (app/worker/unanswered.py), and
# a checkpoint's summary in flight loses its claim to the end's (its write is refused: it was
# claimed before the end, app/worker/results.py finish_session).
END_SESSION = text(
    """
    UPDATE sessions s
    SET status = 'ending', ended_at = now(), last_activity_at = now(),
        next_attempt_at = now(), attempts = 0, last_error = NULL,
        locked_until = NULL, locked_by = NULL
    WHERE s.id = :session_id AND (s.status = 'active' OR s.ended_at IS NULL OR (
        s.status IN ('summarized', 'failed') AND EXISTS (
            SELECT FROM observations o WHERE o.session_id = s.id
              AND (o.created_at > s.summarized_at OR o.result_at > s.summarized_at))))
    RETURNING s.id, s.project_path, s.status, s.created_at
    """
)

QUEUE_SUMMARY = text(
    """
    UPDATE sessions
    SET status = 'ending', next_attempt_at = now(), attempts = 0, last_error = NULL,
        locked_until = NULL, locked_by = NULL
    WHERE id = :session_id
    RETURNING id, project_path, status, created_at
    """
)

SESSION_STATUS = text(
    "SELECT id, project_path, status, created_at FROM sessions WHERE id = :session_id"
)

_OBSERVATION_RETURNING = """
    RETURNING id, session_id, project_path, status, observation_type, original_tokens, truncated
"""

INSERT_OBSERVATION = _touching(
    f"""
    WITH {_SESSION}
    INSERT INTO observations (
        id, session_id, project_path, function_name, function_args, observation_type, entities,
        status, original_tokens, args_bytes, truncated, observed_at
    )
    SELECT :id, s.id, s.project_path, :function_name, {_payload("function_args")},
           :observation_type, CAST(:entities AS jsonb), 'pending', :original_tokens, :args_bytes,
           :truncated, coalesce(CAST(:observed_at AS timestamptz), now())
    FROM s
    ON CONFLICT (id) DO NOTHING
    {_OBSERVATION_RETURNING}
    """
)

# A result recorded with no pending call to match: the observation is born captured.
INSERT_CAPTURED = _touching(
    f"""
    WITH {_SESSION}
    INSERT INTO observations (
        id, session_id, project_path, function_name, function_args, result, observation_type,
        entities, status, original_tokens, result_bytes, truncated, observed_at, result_at,
        next_attempt_at
    )
    SELECT :id, s.id, s.project_path, :function_name, '{{}}'::jsonb, {_payload("result")},
           :observation_type, CAST(:entities AS jsonb), 'captured', :original_tokens,
           :result_bytes, :truncated, coalesce(CAST(:result_at AS timestamptz), now()),
           coalesce(CAST(:result_at AS timestamptz), now()), now()
    FROM s
    ON CONFLICT (id) DO NOTHING
    {_OBSERVATION_RETURNING}
    """
)

SELECT_OBSERVATION_FOR_COMPARE = text(
    """
    SELECT id, session_id, project_path, status, observation_type, original_tokens, truncated,
           function_name, function_args, result, result_at
    FROM observations WHERE id = :id
    """
)

# Merge the result's entities into the call's, as entities.merge_entities does in Python for a
# call this server remembers (MATCH_BY_ID_MERGED): per kind, distinct values in first-seen order
# (the call's, then the result's), at most MAX_PER_KIND of them. Both paths store the same value.
_MERGED_ENTITIES = f"""
    coalesce((
        SELECT jsonb_object_agg(kind, vals) FROM (
            SELECT kind, jsonb_agg(v ORDER BY first_seen) AS vals FROM (
                SELECT kind, v, first_seen,
                       row_number() OVER (PARTITION BY kind ORDER BY first_seen) AS n
                FROM (
                    SELECT kind, v, min(seen) AS first_seen FROM (
                        SELECT e.key AS kind, a.v, ARRAY[0, a.pos] AS seen
                        FROM jsonb_each(o.entities) e,
                             jsonb_array_elements(e.value) WITH ORDINALITY AS a(v, pos)
                        UNION ALL
                        SELECT e.key, a.v, ARRAY[1, a.pos]
                        FROM jsonb_each(CAST(:entities AS jsonb)) e,
                             jsonb_array_elements(e.value) WITH ORDINALITY AS a(v, pos)
                    ) u GROUP BY kind, v
                ) d
            ) r WHERE n <= {MAX_PER_KIND} GROUP BY kind
        ) g
    ), '{{}}'::jsonb)
"""

# `{entities}` and `{where}` are filled in by each statement below.
_APPLY_RESULT = f"""
    UPDATE observations o
    SET result = {_payload("result")}, status = 'captured',
        result_at = coalesce(CAST(:result_at AS timestamptz), now()), next_attempt_at = now(),
        attempts = 0, locked_until = NULL, locked_by = NULL,
        result_bytes = :result_bytes, truncated = o.truncated OR :truncated,
        original_tokens = o.original_tokens + :result_tokens,
        entities = {{entities}}
    {{where}}
    RETURNING o.id, o.session_id, o.project_path, o.status, o.observation_type,
              o.original_tokens, o.truncated
"""

_TO_TARGET = "FROM target WHERE o.id = target.id"

# The newest pending call of that function in the session; SKIP LOCKED lets concurrent results
# of the same function each take a different pending call instead of waiting on one.
MATCH_NEWEST_PENDING = _touching(
    f"""
    WITH {_SESSION},
    target AS (
        SELECT o.id FROM observations o
        WHERE o.session_id = :session_id AND o.function_name = :function_name
          AND o.status = 'pending'
        ORDER BY o.seq DESC LIMIT 1
        FOR UPDATE SKIP LOCKED
    ),
    applied AS ({_APPLY_RESULT.format(entities=_MERGED_ENTITIES, where=_TO_TARGET)})
    SELECT s.project_path AS session_project, applied.* FROM s LEFT JOIN applied ON true
    """
)

# By id, the UPDATE's own WHERE picks the row: it takes the row lock itself and re-checks
# `status = 'pending'` on the latest version if it had to wait, as a FOR UPDATE would, with one
# plan node less to set up per statement.
_BY_ID = """
    WHERE o.id = :observation_id AND o.session_id = :session_id AND o.status = 'pending'
"""

MATCH_BY_ID = _touching(
    f"""
    WITH {_SESSION},
    applied AS ({_APPLY_RESULT.format(entities=_MERGED_ENTITIES, where=_BY_ID)})
    SELECT s.project_path AS session_project, applied.* FROM s LEFT JOIN applied ON true
    """
)

# A call with no result yet that is no longer pending: `POST /api/compress` queued it early, and
# it was compressed (or failed) without one. Its result was refused as "a different result" (409)
# and lost. Only the rare path after MATCH_BY_ID found nothing runs this: the same condition in
# MATCH_BY_ID itself doubled Postgres's CPU a capture request (bench.capture, 25 Nov: 0.11 ->
# 0.24 ms at 16 connections, the throughput ratio 0.56 -> 0.35).
_BY_ID_WITHOUT_RESULT = """
    WHERE o.id = :observation_id AND o.session_id = :session_id AND o.result_at IS NULL
"""

MATCH_BY_ID_WITHOUT_RESULT = _touching(
    f"""
    WITH {_SESSION},
    applied AS ({_APPLY_RESULT.format(entities=_MERGED_ENTITIES, where=_BY_ID_WITHOUT_RESULT)})
    SELECT s.project_path AS session_project, applied.* FROM s LEFT JOIN applied ON true
    """
)

# MATCH_BY_ID when the server still knows the entities it stored with the call: the merge is
# done in Python (`:merged`) instead of by Postgres's jsonb aggregation, which was ~10% of
# Postgres's CPU per capture request. The guard on the stored entities makes a stale or wrong
# `:call_entities` apply nothing (the caller then runs MATCH_BY_ID), never a wrong merge.
_BY_ID_GUARDED = _BY_ID + "  AND o.entities = CAST(:call_entities AS jsonb)\n"

MATCH_BY_ID_MERGED = _touching(
    f"""
    WITH {_SESSION},
    applied AS ({_APPLY_RESULT.format(entities="CAST(:merged AS jsonb)", where=_BY_ID_GUARDED)})
    SELECT s.project_path AS session_project, applied.* FROM s LEFT JOIN applied ON true
    """
)

# The worker takes captured rows in (next_attempt_at, seq) order; position 1 is next.
QUEUE_COMPRESSION = text(
    """
    WITH queued AS (
        UPDATE observations
        SET status = 'captured', next_attempt_at = now(), attempts = 0, last_error = NULL,
            locked_until = NULL, locked_by = NULL
        WHERE id = :observation_id
        RETURNING id, seq, next_attempt_at
    )
    SELECT queued.id, 1 + (
        SELECT count(*) FROM observations o
        WHERE o.status = 'captured' AND o.id <> queued.id
          AND (o.next_attempt_at IS NULL OR o.next_attempt_at < queued.next_attempt_at
               OR (o.next_attempt_at = queued.next_attempt_at AND o.seq < queued.seq))
    ) AS position
    FROM queued
    """
)

SESSION_TOTALS = text(
    """
    SELECT count(*) AS total_observations,
           coalesce(sum(tokens_saved), 0) AS tokens_saved,
           count(*) FILTER (WHERE status = 'pending') AS pending,
           count(*) FILTER (WHERE status = 'captured') AS captured,
           count(*) FILTER (WHERE status = 'compressed') AS compressed,
           count(*) FILTER (WHERE status = 'failed') AS failed
    FROM observations WHERE session_id = :session_id
    """
)
