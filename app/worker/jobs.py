"""The worker's jobs: compress one observation, summarise one session, run one sync, embed a
batch of index rows, purge expired memories. A job holds no transaction while it waits on
Gemini; it writes its result in one short transaction guarded by its claim."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import psycopg
import structlog
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.engine import transaction
from app.db.raw_pool import Conn
from app.index.embedding import (
    claim_unembedded,
    embed_claimed,
    ensure_model_index,
    model_index_known,
    release_claims,
    release_given_up,
)
from app.llm.compress import Compressed, compress_with_gemini, compressed_locally, observation_text
from app.llm.embeddings import Embedder, get_embedder
from app.llm.fallback import (
    EXTRACTIVE,
    ObservationDigest,
    compress_extractive,
    keeps_every_line,
    raw_text,
    summarize_extractive,
)
from app.llm.generation import GeminiCallFailed, capped_delay
from app.llm.ratelimit import (
    DailyBudget,
    GatePaused,
    GeminiGate,
    record_rejected,
    record_usage,
)
from app.llm.summarize import session_text, summarize_with_gemini
from app.privacy import cap_text, sanitize_text
from app.sync import cancels
from app.sync.embed import BatchEmbedder
from app.sync.queries import AUTOCOMMIT
from app.sync.runs import execute_sync_run
from app.tokens import estimate_tokens
from app.worker import claims, results, unanswered
from app.worker.claims import ObservationWork, Queue, SessionWork, SyncRunWork
from app.worker.outage import DatabaseAway, log_failure, retry_while_away

if TYPE_CHECKING:
    from google import genai

log = structlog.get_logger(__name__)

RAW = "raw"

T = TypeVar("T")

# The longest 429 pause a job waits out holding its claim; past it the row is given back.
PAUSE_WAIT_LIMIT_S = 5.0
# The embedding cache's orphans are looked for this often (a scan of the index's hashes), and
# kept this long after they were cached.
CACHE_PRUNE_INTERVAL_S = 3600.0
CACHE_PRUNE_GRACE_S = 3600.0


@dataclass(slots=True)
class JobContext:
    settings: Settings
    sessionmaker: async_sessionmaker[AsyncSession]
    worker_id: str
    gate: GeminiGate
    budget: DailyBudget
    client: genai.Client | None
    embedder: Embedder | None = None
    # One lane at a time makes sure of the model's index (see `embed_batch`).
    index_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # One lane loads the embedding model, the others wait for it (see `embed_batch`).
    embedder_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Idle ends this worker's upkeep may still make (`_idle_pace`): a fraction carries over to
    # the next pass when a pass is shorter than their spacing.
    idle_allowance: float = 0.0
    # Whether this worker's first upkeep gave the rows given up embedding another try: a start
    # often follows the fix (a key, a provider), and nothing else would retry them.
    embeddings_released: bool = False
    # Whether an embedding failed since rows given up were last given another try: the next
    # one that reaches the provider does it (never in the common case: the release scans every
    # row still without a vector).
    embedding_failed: bool = False
    # When this worker last pruned the embedding cache (`maintain`), on the monotonic clock.
    cache_pruned_at: float | None = None
    # Set when the worker stops: ends a wait for the database to answer again (`outage`).
    stopping: asyncio.Event = field(default_factory=asyncio.Event)


async def fail_attempt(
    ctx: JobContext,
    queue: Queue,
    *,
    row_id: object,
    attempts: int,
    error: str,
    retry_after: float | None = None,
) -> str | None:
    """Release a failed claim with exponential backoff (at least the server's Retry-After)."""
    delay = claims.backoff_seconds(
        attempts,
        base=ctx.settings.worker_backoff_base_seconds,
        cap=ctx.settings.worker_backoff_max_seconds,
    )
    if retry_after is not None:
        delay = max(delay, capped_delay(retry_after))
    async with transaction(ctx.sessionmaker) as session:
        status = await claims.record_failure(
            session,
            queue,
            row_id=row_id,
            worker=ctx.worker_id,
            error=error,
            delay=delay,
            max_attempts=ctx.settings.worker_max_attempts,
        )
    log.warning(
        "worker.attempt_failed",
        table=queue.table,
        id=str(row_id),
        attempts=attempts,
        status=status,
        retry_in_seconds=None if status == "failed" else round(delay, 2),
        error=error,
    )
    return status


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """A Gemini call failed (or waits out a 429): the claim was released and the row now has
    `status` (`postponed`: given back without a call)."""

    status: str


@dataclass(frozen=True, slots=True)
class GeminiGaveUp:
    """Gemini failed on the row's last attempt: the extractive fallback writes it instead,
    and `error` stays on the row as its `last_error`."""

    error: str


async def call_gemini(
    ctx: JobContext,
    queue: Queue,
    *,
    row_id: object,
    attempts: int,
    project_path: str,
    call: Callable[[], Awaitable[T]],
) -> T | AttemptFailed | GeminiGaveUp:
    """One Gemini call under the rate gate; a failure feeds the breaker, honours Retry-After
    and releases the claim with backoff, or on the last attempt hands over to the fallback.

    The breaker alone let the fallback take over only after enough failures in one process: an
    observation failing alone (a quiet team, a long outage) ended `failed`, out of search and
    context, and its session's summary said it "could not be compressed".

    While a 429's pause runs longer than `PAUSE_WAIT_LIMIT_S`, the row is given back, due when
    the pause ends, with its attempt uncounted: waiting in the gate held the claim and the lane,
    and a quota's hour-long Retry-After stopped every lane, work that needs no Gemini included."""
    try:
        async with ctx.gate.slot(wait_limit=PAUSE_WAIT_LIMIT_S):
            answer = await call()
    except GatePaused as paused:
        async with transaction(ctx.sessionmaker) as session:
            await results.release_claim(
                session,
                table=queue.table,
                row_id=row_id,
                worker=ctx.worker_id,
                delay=paused.seconds,
            )
        seconds = round(paused.seconds, 2)
        log.info("worker.postponed", table=queue.table, id=str(row_id), seconds=seconds)
        return AttemptFailed("postponed")
    except GeminiCallFailed as error:
        await _record_billed(ctx, error, project_path=project_path)
        ctx.gate.record_failure(error)
        if error.retry_after is not None:
            ctx.gate.pause(error.retry_after)
        if error.final or attempts >= ctx.settings.worker_max_attempts:
            log.warning(
                "worker.gemini_gave_up",
                table=queue.table,
                id=str(row_id),
                attempts=attempts,
                error=str(error),
                using="extractive fallback",
            )
            why = (
                ": a retry would get the same answer"
                if error.final
                else f" after {attempts} attempts"
            )
            return GeminiGaveUp(f"{error} (extractive fallback{why})")
        status = await fail_attempt(
            ctx,
            queue,
            row_id=row_id,
            attempts=attempts,
            error=str(error),
            retry_after=error.retry_after,
        )
        return AttemptFailed(status or "lost")
    ctx.gate.record_success()
    return answer


async def _record_billed(ctx: JobContext, error: GeminiCallFailed, *, project_path: str) -> None:
    """A rejected answer's tokens, in `llm_usage` and this process's daily budget."""
    if not error.billed.tokens:
        return  # no answer came (a timeout, a 5xx): no transaction for nothing to write
    # Spent first: Gemini billed them whether or not the usage row is written.
    ctx.budget.spent(error.billed.tokens)
    async with transaction(ctx.sessionmaker) as session:
        await record_rejected(
            session, error, project_path=project_path, model=ctx.settings.gemini_model
        )


async def _gemini_allowed(ctx: JobContext) -> bool:
    """Whether this call may go to Gemini: a key, a closed breaker, and budget left today."""
    if ctx.client is None or ctx.gate.breaker_open:
        return False
    if ctx.budget.daily_budget == 0:
        return True
    # Without a query when the cached figure is fresh: the session connects on first use.
    async with transaction(ctx.sessionmaker) as session:
        allowed = await ctx.budget.allows(session)
    if not allowed:
        log.warning("gemini.budget_exhausted", budget=ctx.settings.gemini_daily_token_budget)
    return allowed


def _breaker_reason(ctx: JobContext) -> str | None:
    """Gemini's last error when the open breaker is why a row went to the fallback."""
    return ctx.gate.breaker_reason if ctx.client is not None and ctx.gate.breaker_open else None


def _extract(work: ObservationWork) -> str:
    return compress_extractive(
        function_name=work.function_name,
        observation_type=work.observation_type,
        args=work.function_args,
        result=work.result,
        project_path=work.project_path,
        entities=work.entities,
        result_missing=work.result_missing,
    )


async def compress_observation(ctx: JobContext, work: ObservationWork) -> str:
    """Compress one claimed observation; returns the method used, or 'retry'/'failed'."""
    settings = ctx.settings
    observation = observation_text(
        function_name=work.function_name,
        observation_type=work.observation_type,
        args=work.function_args,
        result=work.result,
        max_chars=settings.worker_max_input_chars,
        result_missing=work.result_missing,
    )
    # A small call is kept whole in this form, the extractive text's layout: the text above,
    # built for Gemini, showed in the context block as `Tool: … Type: … Arguments: { "k": … }`
    # and spent ~8% more tokens (testdata's small calls) on its labels and indentation.
    whole = cap_text(
        sanitize_text(
            raw_text(
                function_name=work.function_name,
                args=work.function_args,
                result=work.result,
                result_missing=work.result_missing,
            )
        ),
        settings.worker_max_input_chars,
    )
    result: Compressed | None = None
    gemini_error: str | None = None
    if work.function_name in settings.worker_skip_tools:
        pass
    elif estimate_tokens(whole) < settings.worker_min_compress_tokens:
        # Already shorter than a summary would be: never worth a Gemini call. Kept whole, unless
        # its extract is shorter and still holds every line of the call's strings (a `Glob` that
        # found nothing, a short command): then it only left out JSON syntax, keys and numbers.
        extract = _extract(work)
        if estimate_tokens(extract) < estimate_tokens(whole) and keeps_every_line(
            extract,
            observation_type=work.observation_type,
            args=work.function_args,
            result=work.result,
            project_path=work.project_path,
        ):
            result = compressed_locally(extract, observation=whole, generated_by=EXTRACTIVE)
        else:
            result = compressed_locally(whole, observation=whole, generated_by=RAW)
    elif (breaker := _breaker_reason(ctx)) is not None:
        gemini_error = breaker
    elif await _gemini_allowed(ctx):
        client = ctx.client
        assert client is not None
        outcome = await call_gemini(
            ctx,
            claims.OBSERVATIONS,
            row_id=work.id,
            attempts=work.attempts,
            project_path=work.project_path,
            call=lambda: compress_with_gemini(
                client,
                model=settings.gemini_model,
                observation=observation,
                timeout_s=settings.gemini_timeout_seconds,
            ),
        )
        if isinstance(outcome, AttemptFailed):
            return outcome.status
        if isinstance(outcome, GeminiGaveUp):
            gemini_error = outcome.error
        else:
            result = outcome
    if result is None:
        result = compressed_locally(_extract(work), observation=whole, generated_by=EXTRACTIVE)
    if result.generated_by in (EXTRACTIVE, RAW) and work.original_tokens:
        # Capture's estimate of the call itself: the text built for Gemini counted its labels
        # and indentation as tokens an extract saved, and a raw text its own labels as part of
        # the call (the clamp at 0 saved keeps a raw text's few extra tokens out of the sums).
        result = replace(result, original_tokens=work.original_tokens)
    elif work.original_tokens > estimate_tokens(observation):
        # The text compressed was cut (capture's cap, then AGMEM_WORKER_MAX_INPUT_CHARS), so its
        # count is the cut's, at most ~6,000 tokens: the original is capture's figure, or a
        # 1M-token log would be recorded as saving 6,000.
        result = replace(result, original_tokens=work.original_tokens)
    ctx.budget.spent(result.input_tokens + result.output_tokens)

    stored = await _write_result(
        ctx,
        claims.OBSERVATIONS,
        work.id,
        project_path=work.project_path,
        tokens=(result.input_tokens, result.output_tokens),
        finish=lambda session: results.finish_observation(
            session, observation_id=work.id, worker=ctx.worker_id, result=result, error=gemini_error
        ),
        holds=lambda session: results.holds_compression(
            session, observation_id=work.id, result=result
        ),
    )
    log.info(
        "observation.compressed" if stored else "observation.claim_lost",
        id=work.id,
        generated_by=result.generated_by,
        original_tokens=result.original_tokens,
        compressed_tokens=result.compressed_tokens,
    )
    return result.generated_by if stored else "lost"


async def _write_result(
    ctx: JobContext,
    queue: Queue,
    row_id: object,
    *,
    project_path: str,
    tokens: tuple[int, int],
    finish: Callable[[AsyncSession], Awaitable[bool]],
    holds: Callable[[AsyncSession], Awaitable[bool]],
) -> bool:
    """Write a job's result (`finish`) and Gemini's usage for it (input and output `tokens`) in
    one transaction; whether the claim held. The database's loss as it writes is waited out
    (`outage.retry_while_away`): the write's failure was a failed attempt, and the row was
    claimed and its Gemini call paid again once the database was back. Past the wait,
    `outage.DatabaseAway` leaves the row to its lease. A retry refused its claim while the row
    `holds` this very result counts it written: the try before committed, its reply lost.

    When the write fails otherwise (a deadlock, a constraint), the usage is written alone and
    the error raised: rolled back with the result, the call Gemini billed was missing from
    `llm_usage`, the daily budget's durable count, and the retry paid for it again."""

    async def record(session: AsyncSession) -> None:
        await record_usage(
            session,
            project_path=project_path,
            model=ctx.settings.gemini_model,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
        )

    tries = 0

    async def write() -> bool:
        nonlocal tries
        tries += 1
        async with transaction(ctx.sessionmaker) as session:
            stored = await finish(session)
            if not stored and tries > 1 and await holds(session):
                # The try before committed and only its reply was lost: the usage went with
                # it. Counted again, and the result logged as `claim_lost`, before.
                return True
            if any(tokens):
                await record(session)
            return stored

    try:
        return await retry_while_away(
            write,
            stop=ctx.stopping,
            during="worker.write_result",
            table=queue.table,
            id=str(row_id),
        )
    except DatabaseAway:
        raise  # no usage write either while the database is away
    except Exception:
        if not any(tokens):
            raise
        try:
            async with transaction(ctx.sessionmaker) as session:
                await record(session)
        except Exception as usage_error:
            # The result's own error is the one the attempt records; this one is logged.
            log_failure("worker.usage_not_recorded", usage_error, table=queue.table)
        raise


async def _wait_for_results(ctx: JobContext, work: SessionWork) -> list[ObservationDigest] | None:
    """Before a summary, the session's calls still waiting for their result: each recorded by
    its end is given up on once its grace has passed (docs/worker.md, "A call without its
    result"), then compressed by the lanes; the claim goes back, due when the next grace ends, or
    again once the calls given up on are compressed (a session waits for its `captured`
    observations): None. When none is to be waited for, the session's observations read again,
    claim kept: only calls recorded after the end are pending (left to the timeout), or a result
    came since they were read (the give-up waited for it, or it came before)."""
    try:
        async with transaction(ctx.sessionmaker) as session:
            given = await unanswered.give_up_in_session(
                session, session_id=work.id, grace=ctx.settings.worker_result_grace_seconds
            )
            if not given.closed and given.wait is None:
                return await results.session_digests(session, session_id=work.id)
            await results.release_claim(
                session,
                table="sessions",
                row_id=work.id,
                worker=ctx.worker_id,
                delay=given.wait or 0,
            )
    except sa_exc.OperationalError as error:
        if not isinstance(error.orig, psycopg.errors.DeadlockDetected):
            raise
        # A capture batch (one transaction) applied the results of parallel calls newest first
        # while the give-up locked them oldest first, and Postgres ended the give-up. Those
        # results are landing: the claim goes back, due at once, its attempt uncounted (it was
        # a failed attempt, with a traceback and a backoff).
        async with transaction(ctx.sessionmaker) as session:
            await results.release_claim(
                session, table="sessions", row_id=work.id, worker=ctx.worker_id
            )
        log.info("session.give_up_deadlocked", id=work.id)
        return None
    log.info("session.awaiting_results", id=work.id, given_up=given.closed, wait=given.wait)
    return None


async def summarize_session(ctx: JobContext, work: SessionWork) -> str:
    """Summarise one claimed session from its compressed observations; returns the method."""
    settings = ctx.settings
    async with transaction(ctx.sessionmaker) as session:
        digests = await results.session_digests(session, session_id=work.id)
    # A checkpoint of a session still at work summarises what has come so far: a call running
    # then (a build, a test run) is still to get its result, and the end summarises again.
    if work.ended and any(d.status == "pending" for d in digests):
        fresh = await _wait_for_results(ctx, work)
        if fresh is None:
            return "waiting"
        digests = fresh
    if any(d.status == "captured" for d in digests):
        # A result came after the claim: summarised now, the session would miss it, and its
        # compression would have it summarised again (a second Gemini call, the first wasted).
        # The claim goes back; the session is claimed again once it is compressed.
        async with transaction(ctx.sessionmaker) as session:
            await results.release_claim(
                session, table="sessions", row_id=work.id, worker=ctx.worker_id
            )
        log.info("session.awaiting_compression", id=work.id)
        return "waiting"
    summary: results.SessionSummary | None = None
    tokens = (0, 0)  # Gemini's usage, written with the summary
    wanted = any(d.compressed for d in digests)
    gemini_error = _breaker_reason(ctx) if wanted else None
    if wanted and gemini_error is None and await _gemini_allowed(ctx):
        client = ctx.client
        assert client is not None
        prompt = session_text(
            project_path=work.project_path,
            user_prompt=work.user_prompt,
            observations=digests,
            max_chars=settings.worker_max_input_chars,
        )
        outcome = await call_gemini(
            ctx,
            claims.SESSIONS,
            row_id=work.id,
            attempts=work.attempts,
            project_path=work.project_path,
            call=lambda: summarize_with_gemini(
                client,
                model=settings.gemini_model,
                session=prompt,
                timeout_s=settings.gemini_timeout_seconds,
            ),
        )
        if isinstance(outcome, AttemptFailed):
            return outcome.status
        if isinstance(outcome, GeminiGaveUp):
            gemini_error = outcome.error
        else:
            summary = results.SessionSummary(outcome.text, f"gemini:{settings.gemini_model}")
            input_tokens = outcome.prompt_tokens or estimate_tokens(prompt)
            output_tokens = outcome.billed_output(estimate_tokens(outcome.text))
            ctx.budget.spent(input_tokens + output_tokens)
            tokens = (input_tokens, output_tokens)
    if summary is None:
        text = summarize_extractive(
            project_path=work.project_path, user_prompt=work.user_prompt, observations=digests
        )
        summary = results.SessionSummary(text, EXTRACTIVE)
    written = summary
    stored = await _write_result(
        ctx,
        claims.SESSIONS,
        work.id,
        project_path=work.project_path,
        tokens=tokens,
        finish=lambda session: results.finish_session(
            session,
            session_id=work.id,
            worker=ctx.worker_id,
            summary=written,
            ended=work.ended,
            error=gemini_error,
        ),
        holds=lambda session: results.holds_summary(session, session_id=work.id, summary=written),
    )
    log.info(
        "session.summarized" if stored else "session.claim_lost",
        id=work.id,
        generated_by=summary.generated_by,
        observations=len(digests),
    )
    return summary.generated_by if stored else "lost"


async def run_sync(ctx: JobContext, work: SyncRunWork) -> str:
    """Execute one claimed sync run (it records running -> done | failed itself)."""
    await execute_sync_run(ctx.sessionmaker, ctx.settings, work.id, ctx.gate)
    async with transaction(ctx.sessionmaker) as session:
        await results.finish_sync_claim(session, run_id=work.id, worker=ctx.worker_id)
    log.info("sync_run.executed", id=str(work.id), project=work.project_path)
    return "sync"


async def embed_batch(ctx: JobContext, *, limit: int = 256) -> int:
    """Embed up to `limit` index rows that have no vector yet (cache first); rows embedded."""
    async with transaction(ctx.sessionmaker) as session:
        if not await results.has_unembedded_chunks(
            session, max_attempts=ctx.settings.worker_max_attempts
        ):
            return 0
    if ctx.embedder is None:
        # Every lane that came here first loaded its own copy (2-4 at a worker's start, on 2
        # cores, each seconds long), and a stop waited for all of them.
        async with ctx.embedder_lock:
            if ctx.embedder is None:
                # Loading a model takes a while: off the event loop, which may serve requests.
                ctx.embedder = await asyncio.to_thread(get_embedder, ctx.settings)
    # The model's HNSW index, in its own transaction: made inside each lane's embedding one, it
    # held the table's ShareLock there, and two lanes' UPDATEs of their rows then waited for each
    # other (DeadlockDetected at a worker's first embedding, 2 of 3 bench.worker runs).
    if not model_index_known(ctx.embedder):  # a connection and a transaction only the first time
        async with ctx.index_lock, transaction(ctx.sessionmaker) as session:
            await ensure_model_index(await session.connection(), ctx.embedder)
    # The claim commits before the provider's call: a row locked through it held up every
    # write of that row (a kv memory's PUT) until Gemini answered.
    async with transaction(ctx.sessionmaker) as session:
        rows = await claim_unembedded(
            session,
            limit=limit,
            max_attempts=ctx.settings.worker_max_attempts,
            skip_file_chunks=isinstance(ctx.embedder, BatchEmbedder),
        )
    if not rows:
        return 0
    try:
        async with transaction(ctx.sessionmaker) as session:
            stats = await embed_claimed(session, ctx.embedder, rows)
    except BaseException:  # a stop, a database error: the rows go back now, not in 15 minutes
        with contextlib.suppress(Exception):
            async with transaction(ctx.sessionmaker) as session:
                await release_claims(session, [row.id for row in rows])
        raise
    # A refused batch's split can do both: embed some rows and fail others. Only the failure was
    # logged, and the provider's answer for the embedded rows did not count as seen to work.
    if stats.chunks:
        released = 0
        if stats.computed and ctx.embedding_failed:  # the provider answers again
            ctx.embedding_failed = False
            async with transaction(ctx.sessionmaker) as session:
                released = await release_given_up(
                    session, max_attempts=ctx.settings.worker_max_attempts, refused_too=False
                )
        log.info(
            "embedding.done",
            chunks=stats.chunks,
            computed=stats.computed,
            cached=stats.cached,
            **({"retried_given_up": released} if released else {}),
        )
    if stats.error:
        ctx.embedding_failed = True
        log.warning("embedding.failed", error=stats.error)
    return stats.chunks


def _idle_pace(ctx: JobContext) -> dict[str, Any]:
    """How many idle sessions one upkeep ends, and how far apart they come due. With Gemini, each
    is a summary call: the first upkeep after an upgrade ended every stale session at once, and
    a live session's end, due after them all, waited for the whole burst (2,000 sessions at 60
    calls a minute: half an hour). The idle ends now take at most half of this worker's rate,
    spread over the upkeep's interval; the extractive summary takes milliseconds: not paced."""
    if ctx.client is None:
        return {"limit": None, "spacing": 0.0}
    spacing = 2 * 60.0 / ctx.settings.gemini_requests_per_minute
    # A pass shorter than the spacing (a low rate, a short interval) earns a fraction of an end:
    # it was rounded up to one a pass, and at 5 calls a minute with an upkeep each 10 s the idle
    # ends took six a minute, more than the whole rate. The allowance never exceeds one pass's.
    per_pass = ctx.settings.worker_purge_interval_seconds / spacing
    ctx.idle_allowance = min(ctx.idle_allowance + per_pass, max(1.0, per_pass))
    return {"limit": int(ctx.idle_allowance), "spacing": spacing}


async def sweep_cancels(ctx: JobContext) -> cancels.Swept:
    """The cancels at Gemini due again, of any project (app/sync/cancels.py): only a project's
    own syncs asked them, so a project never synced again kept them pending for ever."""
    async with ctx.sessionmaker() as session:
        connection = await session.connection(execution_options=AUTOCOMMIT)
        driver = cast(Conn, (await connection.get_raw_connection()).driver_connection)
        return await cancels.sweep_due_cancels(driver, ctx.settings, ctx.client, ctx.gate)


async def maintain(ctx: JobContext) -> tuple[int, int]:
    """Periodic upkeep: purge expired memories, fail rows whose last claim expired, give up on
    calls whose result has not come for AGMEM_WORKER_RESULT_TIMEOUT_SECONDS, end sessions idle
    for AGMEM_WORKER_SESSION_IDLE_SECONDS that nobody ended, drop (hourly) the cached vectors
    of text no index row holds; the first pass also gives index rows given up embedding
    another try."""
    async with transaction(ctx.sessionmaker) as session:
        purged = await results.purge_expired_memories(session)
        exhausted = await claims.fail_exhausted(
            session, max_attempts=ctx.settings.worker_max_attempts
        )
        timed_out = await unanswered.give_up_timed_out(
            session, timeout=ctx.settings.worker_result_timeout_seconds
        )
        idle = await unanswered.end_idle_sessions(
            session, idle=ctx.settings.worker_session_idle_seconds, **_idle_pace(ctx)
        )
        released = 0
        if not ctx.embeddings_released:
            released = await release_given_up(
                session, max_attempts=ctx.settings.worker_max_attempts
            )
        pruned = 0
        now = time.monotonic()
        prune = ctx.cache_pruned_at is None or now - ctx.cache_pruned_at >= CACHE_PRUNE_INTERVAL_S
        if prune:
            pruned = await results.prune_embedding_cache(session, grace_seconds=CACHE_PRUNE_GRACE_S)
    ctx.idle_allowance = max(0.0, ctx.idle_allowance - idle)  # committed: spent
    ctx.embeddings_released = True
    if prune:
        ctx.cache_pruned_at = now
    if purged or exhausted or timed_out or idle or released or pruned:
        log.info(
            "worker.maintenance",
            memories_purged=purged,
            failed_after_expiry=exhausted,
            results_given_up=timed_out,
            idle_sessions_ended=idle,
            embeddings_retried=released,
            cached_vectors_dropped=pruned,
        )
    return purged, exhausted
