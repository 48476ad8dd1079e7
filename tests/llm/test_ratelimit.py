from __future__ import annotations

import asyncio

import pytest

from app.llm.generation import MAX_RETRY_AFTER_SECONDS, as_call_failed
from app.llm.ratelimit import GatePaused, GeminiGate


def _gate(max_concurrent: int) -> GeminiGate:
    return GeminiGate(
        requests_per_minute=6000,
        max_concurrent=max_concurrent,
        failure_threshold=0,
        cooldown_seconds=0,
    )


def test_a_call_waiting_for_a_slot_when_a_long_pause_starts_is_refused_not_put_to_sleep() -> None:
    """A lane queued on the concurrency limit passed any check made before it queued; when the
    call ahead of it got a 429 asking for an hour, it slept that hour in the gate, holding its
    claimed row (renewed by its heartbeat) and its lane."""

    async def scenario() -> float:
        gate = _gate(max_concurrent=1)
        first_in = asyncio.Event()

        async def first() -> None:
            async with gate.slot(wait_limit=5):
                first_in.set()
                await asyncio.sleep(0.05)
                gate.pause(3600)  # the call's answer: 429, Retry-After: 3600

        async def second() -> float:
            await first_in.wait()
            with pytest.raises(GatePaused) as paused:
                async with gate.slot(wait_limit=5):
                    raise AssertionError("admitted during the pause")
            return paused.value.seconds

        _, seconds = await asyncio.wait_for(asyncio.gather(first(), second()), timeout=10)
        return seconds

    # The hour asked is honoured up to the cap.
    assert MAX_RETRY_AFTER_SECONDS - 10 < asyncio.run(scenario()) <= MAX_RETRY_AFTER_SECONDS


def test_a_short_pause_is_waited_out_in_the_gate() -> None:
    async def scenario() -> list[str]:
        gate = _gate(max_concurrent=2)
        gate.pause(0.2)
        admitted = []
        async with gate.slot(wait_limit=5):
            admitted.append("call")
        return admitted

    assert asyncio.run(asyncio.wait_for(scenario(), timeout=10)) == ["call"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (TimeoutError(), "TimeoutError"),
        (ValueError("no JSON in the body\nline two"), "ValueError: no JSON in the body"),
    ],
)
def test_the_wrapping_of_an_error_names_its_type_textless_or_not(
    error: Exception, reason: str
) -> None:
    # The wrapper's own cases; resume's use of it is tested through resume
    # (tests/memories/test_resume.py). Wrapped by its text alone, a timeout's (which has none)
    # left the breaker's reason "GeminiCallFailed", which names no cause.
    gate = GeminiGate(
        requests_per_minute=60, max_concurrent=1, failure_threshold=1, cooldown_seconds=60
    )
    failed = as_call_failed(error)
    assert as_call_failed(failed) is failed
    gate.record_failure(failed)
    assert gate.breaker_open
    assert gate.breaker_reason.startswith(f"{reason} (extractive fallback")
