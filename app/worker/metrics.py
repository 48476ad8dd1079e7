"""The worker's backlog and results, for `GET /health` and `agmem status`: one query for the
counts, one for tokens saved by project."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

METRICS_SQL = text(
    """
    WITH o AS (
      SELECT
        count(*) FILTER (WHERE status = 'captured'
          AND (locked_until IS NULL OR locked_until <= now())) AS pending,
        count(*) FILTER (WHERE status = 'captured' AND locked_until > now()) AS in_flight,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        count(*) FILTER (WHERE status = 'compressed') AS compressed,
        count(*) FILTER (WHERE status = 'pending') AS awaiting_result,
        count(*) FILTER (WHERE status <> 'pending' AND result_at IS NULL) AS without_result,
        min(coalesce(result_at, created_at)) FILTER (WHERE status = 'captured') AS oldest,
        coalesce(sum(tokens_saved) FILTER (WHERE status = 'compressed'), 0) AS tokens_saved
      FROM observations
    ), s AS (
      SELECT
        count(*) FILTER (WHERE status = 'ending'
          AND (locked_until IS NULL OR locked_until <= now())) AS pending,
        count(*) FILTER (WHERE status = 'ending' AND locked_until > now()) AS in_flight,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        count(*) FILTER (WHERE status = 'summarized') AS summarized,
        min(coalesce(ended_at, last_activity_at)) FILTER (WHERE status = 'ending') AS oldest
      FROM sessions
    ), r AS (
      SELECT
        count(*) FILTER (WHERE status = 'queued') AS pending,
        count(*) FILTER (WHERE status = 'running') AS in_flight,
        min(created_at) FILTER (WHERE status = 'queued') AS oldest
      FROM sync_runs
    )
    SELECT
      o.pending AS obs_pending, o.in_flight AS obs_in_flight, o.failed AS obs_failed,
      o.compressed, o.awaiting_result, o.without_result, o.tokens_saved,
      s.pending AS ses_pending, s.in_flight AS ses_in_flight, s.failed AS ses_failed,
      s.summarized, r.pending AS sync_pending, r.in_flight AS sync_in_flight,
      (SELECT count(*) FROM memory_chunks WHERE embedding IS NULL) AS embed_pending,
      extract(epoch FROM now() - least(o.oldest, s.oldest, r.oldest)) AS oldest_age
    FROM o, s, r
    """
)

TOKENS_BY_PROJECT_SQL = text(
    "SELECT project_path, sum(tokens_saved) AS saved FROM observations "
    "WHERE status = 'compressed' GROUP BY project_path ORDER BY saved DESC, project_path LIMIT 50"
)


# The application_name of a worker's LISTEN connection, held as long as it runs: /health counts
# them to say whether any worker runs at all.
WORKER_APPLICATION_NAME = "agmem-worker"


def shape_metrics(counts: Any, by_project: Any) -> dict[str, Any]:
    """The `worker` object of /health (camelCase, as the API speaks) from the two queries."""
    return {
        "pending": int(counts.obs_pending + counts.ses_pending + counts.sync_pending),
        "failed": int(counts.obs_failed + counts.ses_failed),
        "inFlight": int(counts.obs_in_flight + counts.ses_in_flight + counts.sync_in_flight),
        "compressed": int(counts.compressed),
        "summarized": int(counts.summarized),
        "awaitingResult": int(counts.awaiting_result),
        # Calls given up on (or compressed early) with no result recorded.
        "withoutResult": int(counts.without_result),
        "embedPending": int(counts.embed_pending),
        "oldestPendingSeconds": (
            round(float(counts.oldest_age), 1) if counts.oldest_age is not None else None
        ),
        "tokensSaved": int(counts.tokens_saved),
        "tokensSavedByProject": {r.project_path: int(r.saved) for r in by_project},
        "observations": {
            "pending": int(counts.obs_pending),
            "inFlight": int(counts.obs_in_flight),
            "failed": int(counts.obs_failed),
        },
        "sessions": {
            "pending": int(counts.ses_pending),
            "inFlight": int(counts.ses_in_flight),
            "failed": int(counts.ses_failed),
        },
        "syncRuns": {"pending": int(counts.sync_pending), "inFlight": int(counts.sync_in_flight)},
    }


# For `agmem status`: how the compressed observations were written, and today's Gemini spend.
COMPRESSED_BY_SQL = text(
    "SELECT coalesce(generated_by, 'unknown') AS method, count(*) AS n, "
    "count(*) FILTER (WHERE last_error IS NOT NULL) AS after_failure "
    "FROM observations WHERE status = 'compressed' GROUP BY 1 ORDER BY 1"
)


# The error behind the newest fallback text: a compressed row keeps `last_error` only when Gemini
# failed it (its last attempt, or the open breaker).
LAST_GEMINI_FAILURE_SQL = text(
    "SELECT last_error, compressed_at FROM observations "
    "WHERE status = 'compressed' AND last_error IS NOT NULL "
    "ORDER BY compressed_at DESC NULLS LAST LIMIT 1"
)


# For `agmem status`: the index rows by model and whether they have a vector, which gives the
# table's count too (a count(*) of its own was a second pass over every row). Not in /health: it
# reads every row (84-101 ms at 100k chunks against 0.1 ms for the rest of /health,
# docs/benchmarks.md).
CHUNKS_BY_MODEL_SQL = text(
    "SELECT model, embedding IS NOT NULL AS embedded, count(*) AS n FROM memory_chunks "
    "GROUP BY model, embedded ORDER BY n DESC, model"
)


def describe_vectors(rows: Any, current: str) -> str:
    """`1200 on local:wordllama-l2_supercat:256; 35 on another model (gemini:...:768 35), found
    by keyword only until ...`: a model switch's re-embedding, and whether it is finished.
    A `current` ending in ":" (a width only the model knows) matches the model at any width."""

    def ours(model: str) -> bool:
        return model.startswith(current) if current.endswith(":") else model == current

    mine = [row for row in rows if ours(row.model)]
    others = [row for row in rows if not ours(row.model)]
    named = ", ".join(sorted({row.model for row in mine})) or current.rstrip(":")
    line = f"{sum(int(row.n) for row in mine)} on {named}"
    if others:
        line += (
            f"; {sum(int(row.n) for row in others)} on another model "
            f"({', '.join(f'{row.model} {row.n}' for row in others)}), found by keyword only "
            "until `agmem sync --reembed` moves them"
        )
    return line


def describe_compressed_by(rows: Any) -> str:
    """`extractive 2 (1 after Gemini failed), gemini:gemini-2.5-flash 1, raw 1`."""
    parts = []
    for row in rows:
        failed = f" ({row.after_failure} after Gemini failed)" if row.after_failure else ""
        parts.append(f"{row.method} {row.n}{failed}")
    return ", ".join(parts)
