"""Cost and rate safety for Gemini calls: concurrency, requests per minute, 429 pauses, a circuit
breaker, and the durable daily token budget in `llm_usage`.

The gate is per process; the budget is in Postgres, so every worker process shares it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.config import Settings
from app.errors import first_line
from app.llm.generation import GeminiCallFailed, capped_delay

log = structlog.get_logger(__name__)


class GatePaused(Exception):
    """A 429's pause runs longer than the caller will wait for a slot."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"Gemini paused for {seconds:.0f} s")
        self.seconds = seconds


class GeminiGate:
    """Admits Gemini calls: at most `max_concurrent` at once, spaced to `requests_per_minute`,
    none while a 429's Retry-After runs, and none while the breaker is open."""

    def __init__(
        self,
        *,
        requests_per_minute: int,
        max_concurrent: int,
        failure_threshold: int,
        cooldown_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spacing = 60.0 / requests_per_minute
        self._semaphore = asyncio.Semaphore(max_concurrent)
        self._lock = asyncio.Lock()
        self._next_slot = 0.0
        self._paused_until = 0.0
        self._failure_threshold = failure_threshold
        self._cooldown = cooldown_seconds
        self._consecutive_failures = 0
        self._open_until = 0.0
        self._clock = clock
        self._last_failure = ""

    @property
    def breaker_open(self) -> bool:
        """True while Gemini has failed `failure_threshold` times in a row (0 disables this)."""
        return self._clock() < self._open_until

    @asynccontextmanager
    async def slot(self, *, wait_limit: float | None = None) -> AsyncIterator[None]:
        """Hold one call slot: wait for concurrency, the request spacing and any 429 pause;
        `GatePaused` instead of a pause longer than `wait_limit` seconds. The pause is read once
        the slot is free: a call queued for it when the call ahead got its 429 must see that."""
        async with self._semaphore:
            async with self._lock:
                now = self._clock()
                if wait_limit is not None and self._paused_until - now > wait_limit:
                    raise GatePaused(self._paused_until - now)
                start = max(now, self._next_slot, self._paused_until)
                self._next_slot = start + self._spacing
            if start > now:
                await asyncio.sleep(start - now)
            yield

    def paused_for(self) -> float:
        """Seconds left of the pause a 429 asked for (0 when none runs): for what asks Gemini
        outside a slot (the worker's sweep of Batch cancels), which waits it out as well."""
        return max(0.0, self._paused_until - self._clock())

    def pause(self, seconds: float) -> None:
        """Stop admitting calls for `seconds` (the server's Retry-After), at most
        `MAX_RETRY_AFTER_SECONDS`: an unbounded pause stopped the process's calls for good."""
        seconds = capped_delay(seconds)
        self._paused_until = max(self._paused_until, self._clock() + seconds)
        log.info("gemini.paused", seconds=seconds)

    def record_success(self) -> None:
        self._consecutive_failures = 0

    @property
    def breaker_reason(self) -> str:
        """Why the breaker is open, for the rows it sends to the fallback: without it a wrong
        key's fallback rows said nothing of the key (their `last_error` stayed empty)."""
        return (
            f"{self._last_failure} (extractive fallback: Gemini failed "
            f"{self._failure_threshold} times in a row)"
        )

    def record_failure(self, error: GeminiCallFailed) -> None:
        """A generation call failed: counted toward the breaker unless `final` (a blocked text,
        a cut with nothing whole: a retry gets the same, and it says nothing of Gemini's health;
        three such rows opened the breaker for every compression). Only generation calls: a
        Batch cancel's 429 pauses the gate and counts nothing; counted, a sweep's cancels would
        open the breaker, the cooldown's compressions all extractive (docs/worker.md)."""
        if error.final:
            return
        self._last_failure = first_line(error)[:200] or "gemini call failed"
        self._consecutive_failures += 1
        if self._failure_threshold and self._consecutive_failures >= self._failure_threshold:
            self._open_until = self._clock() + self._cooldown
            self._consecutive_failures = 0
            log.warning(
                "gemini.breaker_open", cooldown_seconds=self._cooldown, using="extractive fallback"
            )


def gemini_gate(settings: Settings) -> GeminiGate:
    """A process's gate for its Gemini calls, from the settings."""
    return GeminiGate(
        requests_per_minute=settings.gemini_requests_per_minute,
        max_concurrent=settings.gemini_max_concurrent,
        failure_threshold=settings.gemini_failure_threshold,
        cooldown_seconds=settings.gemini_failure_cooldown_seconds,
    )


# Today's Gemini spend: what the daily budget counts and what `agmem status` shows.
USAGE_TODAY_SQL = text(
    "SELECT coalesce(sum(input_tokens + output_tokens), 0) AS tokens, "
    "coalesce(sum(requests), 0) AS calls FROM llm_usage "
    "WHERE day = (now() AT TIME ZONE 'UTC')::date"
)

_RECORD_USAGE = text(
    "INSERT INTO llm_usage (day, project_path, model, requests, input_tokens, output_tokens) "
    "VALUES ((now() AT TIME ZONE 'UTC')::date, :project_path, :model, 1, :input, :output) "
    "ON CONFLICT (day, project_path, model) DO UPDATE SET "
    "requests = llm_usage.requests + 1, "
    "input_tokens = llm_usage.input_tokens + EXCLUDED.input_tokens, "
    "output_tokens = llm_usage.output_tokens + EXCLUDED.output_tokens"
)


async def tokens_used_today(session: AsyncSession) -> int:
    """Gemini tokens (input + output) spent today (UTC) by every worker, for every project."""
    return int((await session.execute(USAGE_TODAY_SQL)).one().tokens)


class DailyBudget:
    """Today's token spend, read from `llm_usage` at most every `refresh_seconds` and kept
    current in between with this process's own calls, so that a busy worker does not pay a
    query per call. Other processes' calls are seen at the next refresh."""

    def __init__(
        self,
        daily_budget: int,
        *,
        refresh_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.daily_budget = daily_budget
        self._refresh = refresh_seconds
        self._clock = clock
        self._used = 0
        self._read_at: float | None = None

    async def allows(self, session: AsyncSession) -> bool:
        """Whether another call fits today's budget; a budget of 0 means unlimited."""
        if self.daily_budget == 0:
            return True
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._refresh:
            self._used = await tokens_used_today(session)
            self._read_at = now
        return self._used < self.daily_budget

    def spent(self, tokens: int) -> None:
        """Count this process's call until the next read of `llm_usage` includes it."""
        self._used += tokens


async def record_rejected(
    session: AsyncSession, error: GeminiCallFailed, *, project_path: str, model: str
) -> int:
    """The tokens of an answer Gemini billed and the call rejected (blocked, cut, oversize), in
    `llm_usage`; how many, for a caller's daily budget. Only a stored answer's were recorded,
    and a run of rejected answers spent the budget unseen."""
    billed = error.billed
    if billed.tokens:
        await record_usage(
            session,
            project_path=project_path,
            model=model,
            input_tokens=billed.prompt_tokens or 0,
            output_tokens=billed.billed_output,
        )
    return billed.tokens


async def record_usage(
    session: AsyncSession, *, project_path: str, model: str, input_tokens: int, output_tokens: int
) -> None:
    """Add one call's tokens to today's row for (project, model)."""
    await session.execute(
        _RECORD_USAGE,
        {
            "project_path": project_path,
            "model": model,
            "input": input_tokens,
            "output": output_tokens,
        },
    )
