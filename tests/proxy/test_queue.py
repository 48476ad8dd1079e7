"""Capture jobs run in submission order per key, and one failing never stops the next."""

from __future__ import annotations

import asyncio

from app.proxy.queue import OrderedJobs


def test_jobs_run_in_order_per_key_and_survive_failures() -> None:
    ran: list[str] = []

    async def scenario() -> None:
        jobs = OrderedJobs()
        release = asyncio.Event()
        other_ran = asyncio.Event()

        async def slow() -> None:
            await release.wait()
            ran.append("a1")

        async def failing() -> None:
            ran.append("a2")
            raise RuntimeError("capture broke")

        async def after() -> None:
            ran.append("a3")

        async def other_key() -> None:
            ran.append("b1")
            other_ran.set()

        jobs.submit("a", slow)
        jobs.submit("a", failing)
        jobs.submit("a", after)
        jobs.submit("b", other_key)
        # "a"'s later jobs took their turn on the loop before "b1" (tasks start in order).
        await asyncio.wait_for(other_ran.wait(), timeout=5)
        assert ran == ["b1"]  # "a" waits for its first job; "b" does not wait for "a"
        release.set()
        await jobs.drain(timeout_s=5)
        assert jobs.pending == 0

    asyncio.run(scenario())
    assert ran == ["b1", "a1", "a2", "a3"]


def test_drain_cancels_what_outlives_the_timeout() -> None:
    async def scenario() -> bool:
        jobs = OrderedJobs()
        jobs.submit("k", lambda: asyncio.sleep(60))
        await jobs.drain(timeout_s=0.05)
        return jobs.pending == 0

    assert asyncio.run(scenario())
