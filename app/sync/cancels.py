"""Cancelling at Gemini the Batch API jobs nothing waits for any more (a model switch closed
them; `embedding_batches.cancel_status`, migration 0007).

The sync that closes a job asks its cancel after its embedding pass (`cancel_at_gemini`), and
asks again the project's cancels still pending; the worker sweeps the pending cancels of every
project (`sweep_due_cancels`): only the project's own syncs asked them, so a project never
synced again kept them pending for ever. A cancel is due when pending and last tried
`queries.CANCEL_RETRY_MINUTES` ago; whoever asks it takes it first (its `updated_at` moved to
now, under a row lock that others skip), so a sync and workers in any number of processes never
ask one job's cancel twice at once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple

import structlog

from app.config import Settings
from app.db.raw_pool import Conn
from app.llm.embeddings import Embedder
from app.llm.ratelimit import GeminiGate
from app.sync import queries
from app.sync.embed import BatchEmbedder

if TYPE_CHECKING:
    from google import genai

    from app.llm.gemini_embeddings import CancelOutcome

log = structlog.get_logger(__name__)

# All of one pass's cancels together, asked at once: the sync holds its project's lock
# meanwhile, and each cancel one after another, up to 10 s per HTTP phase, held a watch's every
# sync 30 s for 3 jobs at a Gemini that did not answer. One cut short stays pending.
CANCEL_DEADLINE_SECONDS = 5.0
# The most cancels one sweep takes: what is left is the next pass's (at once when one was full).
SWEEP_LIMIT = 20

Cancel = Callable[[str], Awaitable["CancelOutcome"]]


async def cancel_at_gemini(
    connection: Conn,
    settings: Settings,
    embedder: Embedder,
    to_cancel: list[queries.CancelToDo],
    gate: GeminiGate | None = None,
) -> None:
    """A sync's cancels (those `close_superseded_batches` took): with the embedder's own client
    when it is Gemini's, else with one from the settings' key (a switch to `local` keeps it).
    Never fails the sync.

    A sync the worker runs passes the worker's `gate`: its cancels go to the quota of the
    worker's other calls, so none is asked while a 429's pause runs (each due again
    `queries.CANCEL_RETRY_MINUTES` later, as after a failed try), and a 429 one gets pauses the
    gate. They ignored both: asked into a quota a compression's 429 had just said was spent, and
    a cancel's own 429 let the next compression go at once."""
    if not to_cancel:
        return
    # Imported here: google-genai costs ~0.3 s to import, paid only when there is a job to cancel.
    from app.llm.gemini import GeminiNotConfigured, close_client
    from app.llm.gemini_embeddings import cancel_client

    key = settings.gemini_api_key
    if gate is not None and gate.paused_for() > 0:
        await _ask_and_settle(connection, key, to_cancel, None, HELD)
        return
    if isinstance(embedder, BatchEmbedder):
        await _ask_and_settle(connection, key, to_cancel, _pausing(embedder.cancel_batch, gate), "")
        return
    if all(job.expired for job in to_cancel):
        await _ask_and_settle(connection, key, to_cancel, None, "")
        return
    try:
        client = cancel_client(settings)
    except GeminiNotConfigured as error:
        await _ask_and_settle(connection, key, to_cancel, None, f"not cancelled: {error.detail}")
        return
    # The client is this sync's alone: closed on every way out, a failure and a stop included,
    # or its connection to Gemini stayed open until the garbage collector came by.
    try:
        await _ask_and_settle(connection, key, to_cancel, _cancel_with(client, settings, gate), "")
    finally:
        await close_client(client)


# Why a sync's cancel was not asked; without the seconds left, so that it is logged once.
HELD = "not asked: a 429's pause on this process's Gemini calls was running"


class Swept(NamedTuple):
    taken: int
    failed: int  # of those taken, how many stay pending (refused, unreachable, cut)
    paused: float = 0.0  # seconds left, after the pass, of a 429's pause on the process's calls
    held: bool = False  # a pause held the pass: it asked Gemini nothing

    @property
    def more_now(self) -> bool:
        """A full pass that all went through: the backlog may hold more due now. One with a
        failure waits its interval: against a Gemini answering 429 a backlog of 1,000 was asked
        in 6.7 s of back-to-back passes, spending the quota embeddings share."""
        return self.taken >= SWEEP_LIMIT and not self.failed and not self.held

    def next_in(self, interval: float) -> float:
        """Seconds until the next pass: none after a full one, else `interval`, and never
        before a 429's pause ends (at its end after a pass it held, not an interval later)."""
        if self.held:
            return self.paused
        return max(self.paused, 0.0 if self.more_now else interval)


async def sweep_due_cancels(
    connection: Conn, settings: Settings, client: genai.Client | None, gate: GeminiGate
) -> Swept:
    """Take and ask up to `SWEEP_LIMIT` due cancels of any project. Without a client (no key)
    only those past a job's lifetime, settled `expired` without a call: the others stay as they
    are for a worker with a key. The same while the process's `gate` holds a 429's pause: the
    cancels share the quota of its other calls, and one asked into it waited 10 minutes for its
    next try. A 429 a cancel gets pauses the gate, so that the other calls wait it out too.

    Outside the gate's slots: a pass's cancels, up to 5 s each, held the lanes' calls."""
    held = client is not None and gate.paused_for() > 0
    to_cancel = await queries.take_due_cancels(
        connection, limit=SWEEP_LIMIT, expired_only=client is None or held
    )
    failed = 0
    if to_cancel:
        cancel = None if client is None or held else _cancel_with(client, settings, gate)
        failed = await _ask_and_settle(connection, settings.gemini_api_key, to_cancel, cancel, "")
    return Swept(len(to_cancel), failed, gate.paused_for(), held)


def _cancel_with(client: genai.Client, settings: Settings, gate: GeminiGate | None) -> Cancel:
    from app.llm.gemini_embeddings import cancel_batch, cancel_timeout_ms

    timeout_ms = cancel_timeout_ms(settings)
    key = settings.gemini_api_key

    async def cancel(name: str) -> CancelOutcome:
        return await cancel_batch(client, name, timeout_ms=timeout_ms, key=key)

    return _pausing(cancel, gate)


def _pausing(cancel: Cancel, gate: GeminiGate | None) -> Cancel:
    """`cancel`, a 429's Retry-After pausing `gate` (the process's other calls wait it out). Not
    a failure for the gate's breaker (docs/worker.md, "Cost and rate safety"): a sweep's 20
    cancels answered 429 at once would open it, every compression extractive for its cooldown,
    where the pause alone has them wait for Gemini."""
    if gate is None:
        return cancel

    async def paused_on_429(name: str) -> CancelOutcome:
        outcome = await cancel(name)
        if outcome.retry_after is not None:
            gate.pause(outcome.retry_after)
        return outcome

    return paused_on_429


async def _ask_and_settle(
    connection: Conn,
    key: str | None,
    to_cancel: list[queries.CancelToDo],
    cancel: Cancel | None,
    unconfigured: str,
) -> int:
    """One try per job, all at once, within `CANCEL_DEADLINE_SECONDS` in all; what fails stays
    `pending`, due again `queries.CANCEL_RETRY_MINUTES` later, and is counted in the return. A
    failure is logged when it differs from the last one: once for a missing key, not at every
    try."""
    from app.llm.gemini_embeddings import CancelOutcome, describe_error

    asked: dict[uuid.UUID, asyncio.Task[CancelOutcome]] = {}
    try:
        if cancel is not None:
            asked = {
                job.id: asyncio.ensure_future(cancel(job.job))
                for job in to_cancel
                if not job.expired
            }
        if asked:
            await asyncio.wait(asked.values(), timeout=CANCEL_DEADLINE_SECONDS)
    finally:  # cut by the deadline, or the caller cancelled: no request outlives it
        late = [task for task in asked.values() if not task.done()]
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
    cut = CancelOutcome(
        "pending",
        f"cancel cut: no answer within {CANCEL_DEADLINE_SECONDS:g} s "
        "(the bound on all of a pass's cancels)",
    )

    settled: list[tuple[uuid.UUID, str, str | None]] = []
    for job in to_cancel:
        request = asked.get(job.id)
        if job.expired:
            outcome = CancelOutcome(
                "expired",
                f"not cancelled: {queries.JOB_LIFETIME_HOURS} hours past its creation",
            )
        elif request is None:
            outcome = CancelOutcome("pending", unconfigured)
        elif request.cancelled():
            outcome = cut
        elif (failure := request.exception()) is not None:  # tried again later
            outcome = CancelOutcome(
                "pending", f"cancel failed: {describe_error(failure, key)}"[:1000]
            )
        else:
            outcome = request.result()
        settled.append((job.id, outcome.status, outcome.error))
        if outcome.status == "pending":
            if outcome.error == job.error:
                continue
            log.warning(
                "sync.batch_cancel_failed", project=job.project, job=job.job, error=outcome.error
            )
        else:
            log.info(
                "sync.batch_cancel_settled",
                project=job.project,
                job=job.job,
                status=outcome.status,
                error=outcome.error,
            )
    if settled:
        await queries.settle_cancels(connection, settled)
    return sum(status == "pending" for _, status, _ in settled)
