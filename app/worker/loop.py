"""The worker: `concurrency` lanes that each claim and run one unit of work at a time, woken by
LISTEN/NOTIFY when new work is committed, and polling only as a safety net."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.engine import transaction
from app.db.raw_pool import libpq_url
from app.errors import error_name, first_line
from app.llm.embeddings import Embedder
from app.llm.gemini import close_client, make_client
from app.llm.ratelimit import DailyBudget, gemini_gate
from app.worker import claims, jobs, rescan, results
from app.worker.claims import Queue
from app.worker.metrics import WORKER_APPLICATION_NAME
from app.worker.outage import DatabaseAway, database_lost, log_failure, retry_while_away

log = structlog.get_logger(__name__)

WORK_CHANNEL = "agmem_work"  # the NOTIFY channel of the triggers in migration 0001
# How long a stopping worker lets each lane finish the job in hand before cancelling it (its
# claim is then given back). docker-compose.yml's stop_grace_period must exceed it.
STOP_GRACE_SECONDS = 10.0


async def _grace(lanes: list[asyncio.Task[None]], hurry: asyncio.Event) -> None:
    """Wait for `lanes` to end, at most STOP_GRACE_SECONDS, and no longer than until `hurry`."""
    ended = asyncio.ensure_future(asyncio.wait(lanes))
    hurried = asyncio.ensure_future(hurry.wait())
    try:
        await asyncio.wait(
            (ended, hurried), timeout=STOP_GRACE_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        ended.cancel()
        hurried.cancel()


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Claims work from Postgres and runs it; any number of workers may share one database."""

    def __init__(
        self,
        *,
        settings: Settings,
        sessionmaker: async_sessionmaker[AsyncSession],
        database_url: str,
        concurrency: int | None = None,
        worker_id: str | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.settings = settings
        self.concurrency = concurrency or settings.worker_concurrency
        self.id = worker_id or default_worker_id()
        self._database_url = database_url
        client = (
            make_client(settings, timeout_ms=int(settings.gemini_timeout_seconds * 1000))
            if settings.gemini_api_key
            else None
        )
        gate = gemini_gate(settings)
        budget = DailyBudget(settings.gemini_daily_token_budget)
        self.ctx = jobs.JobContext(settings, sessionmaker, self.id, gate, budget, client, embedder)
        # Set once, by the next wake, then replaced: a lane keeps the one in place when it
        # looked for work, so a wake that comes before it sleeps is not lost (a set-and-clear
        # woke only the lanes already asleep: a lane in its next-due query slept on through the
        # stop, or through new work, for the whole poll).
        self._wake = asyncio.Event()
        self._stopping = False

    def wake(self) -> None:
        """Wake every idle lane (new work was notified, or the worker is stopping)."""
        woken, self._wake = self._wake, asyncio.Event()
        woken.set()

    async def step(self) -> bool:
        """Claim and run one unit of work of any kind; False when nothing is due."""
        params: dict[str, Any] = {
            "worker": self.id,
            "lease": self.settings.worker_lease_seconds,
            "limit": 1,
            "max_attempts": self.settings.worker_max_attempts,
        }
        async with transaction(self.ctx.sessionmaker) as session:
            observations = await claims.claim_observations(session, **params)
        if observations:
            work = observations[0]
            await self._guard(
                claims.OBSERVATIONS,
                work.id,
                work.attempts,
                lambda: jobs.compress_observation(self.ctx, work),
            )
            return True
        async with transaction(self.ctx.sessionmaker) as session:
            sessions = await claims.claim_sessions(session, **params)
        if sessions:
            item = sessions[0]
            await self._guard(
                claims.SESSIONS,
                item.id,
                item.attempts,
                lambda: jobs.summarize_session(self.ctx, item),
            )
            return True
        async with transaction(self.ctx.sessionmaker) as session:
            runs = await claims.claim_sync_runs(session, **params)
        if runs:
            run = runs[0]
            await self._guard(
                claims.SYNC_RUNS, run.id, run.attempts, lambda: jobs.run_sync(self.ctx, run)
            )
            return True
        return await jobs.embed_batch(self.ctx) > 0

    async def _guard(
        self, queue: Queue, row_id: object, attempts: int, job: Callable[[], Awaitable[str]]
    ) -> None:
        """Run a job; an unexpected error is a failed attempt, a cancellation gives the claim
        back so a restart does not wait for the lease."""
        heartbeat = asyncio.create_task(self._heartbeat(queue, row_id))
        try:
            await job()
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                async with transaction(self.ctx.sessionmaker) as session:
                    await results.release_claim(
                        session, table=queue.table, row_id=row_id, worker=self.id
                    )
            raise
        except DatabaseAway as away:
            # The job's result (a Gemini answer, paid for) was not written: the database did not
            # answer again in time, or the worker stopped. Its failed attempt could not be
            # written either: the row is left to its lease.
            log.warning(
                "worker.result_not_written",
                table=queue.table,
                id=str(row_id),
                error=str(away),
                left_to_lease=True,
            )
        except Exception as error:  # a bug or a database error must not kill the lane
            lost = database_lost(error)
            if lost:
                # The database went away under the job (a restart as it read the rows): one
                # line. It was a traceback, and the failed attempt's own write failed too: the
                # row waited out its lease (120 s), claimed, before anyone retried it.
                log_failure("worker.job_error", error, table=queue.table, id=str(row_id))
            else:
                log.exception("worker.job_error", table=queue.table, id=str(row_id))
            # The first line: SQLAlchemy's text goes on with the statement (and a link), kept
            # on the row and logged again in `worker.attempt_failed`; the traceback has it all.
            await self._fail_attempt(
                queue, row_id, attempts, f"{error_name(error)}: {first_line(error)}", wait=lost
            )
        finally:
            heartbeat.cancel()

    async def _fail_attempt(
        self, queue: Queue, row_id: object, attempts: int, error: str, *, wait: bool
    ) -> None:
        """Record the failed attempt (retried with backoff, or `failed` after the last). With
        `wait`, the database is away: tried again until it answers, within the bounds of
        `outage.retry_while_away` (30 s, or until the worker stops); then the row is left to
        its lease. The attempt counts even then: a job that takes the database down itself (a
        row whose query kills its backend) must run out of attempts, not retry for good."""

        async def record() -> None:
            await jobs.fail_attempt(self.ctx, queue, row_id=row_id, attempts=attempts, error=error)

        with contextlib.suppress(Exception):
            if wait:
                await retry_while_away(record, stop=self.ctx.stopping, during=None)
            else:
                await record()

    async def _heartbeat(self, queue: Queue, row_id: object) -> None:
        """Renew the lease while a long job (a big sync, a slow model) is still running."""
        lease = self.settings.worker_lease_seconds
        while True:
            await asyncio.sleep(lease / 3)
            with contextlib.suppress(Exception):
                async with transaction(self.ctx.sessionmaker) as session:
                    if not await claims.renew_lease(
                        session, queue, row_id=row_id, worker=self.id, lease=lease
                    ):
                        return

    async def drain(self) -> None:
        """Run every unit of work that is due now with all lanes, then return."""
        await jobs.maintain(self.ctx)

        async def lane() -> bool:
            did = False
            while await self.step():
                did = True
            return did

        try:
            while any(await asyncio.gather(*(lane() for _ in range(self.concurrency)))):
                pass
        finally:
            await self.close()

    async def close(self) -> None:
        """Close the Gemini client's connections, both transports': google-genai keeps a sync
        httpx client beside the async one, and `aio.aclose` closes only the async one."""
        if self.ctx.client is not None:
            await close_client(self.ctx.client)

    async def run(self, stop: asyncio.Event, *, hurry: asyncio.Event | None = None) -> None:
        """Work until `stop` is set: the lanes, the listener and the periodic upkeep. Once
        stopping, the jobs in hand are let finish for STOP_GRACE_SECONDS, or until `hurry`."""
        log.info("worker.started", worker=self.id, concurrency=self.concurrency)
        await self._rescan_first(stop)
        tasks = [asyncio.create_task(self._listen(), name="agmem-listen")]
        tasks.append(asyncio.create_task(self._maintain(), name="agmem-maintain"))
        tasks.append(asyncio.create_task(self._rescan(), name="agmem-rescan"))
        tasks.append(asyncio.create_task(self._sweep_cancels(), name="agmem-cancels"))
        lanes = [
            asyncio.create_task(self._lane(), name=f"agmem-lane-{n}")
            for n in range(self.concurrency)
        ]
        try:
            await stop.wait()
        finally:
            self._stopping = True
            self.ctx.stopping.set()
            self.wake()
            for task in tasks:
                task.cancel()
            # Lanes finish the job in hand unless it outlasts the grace period, or is hurried.
            await _grace(lanes, hurry or asyncio.Event())
            for task in lanes:
                task.cancel()
            await asyncio.gather(*tasks, *lanes, return_exceptions=True)
            await self.close()
            log.info("worker.stopped", worker=self.id)

    async def _lane(self) -> None:
        while not self._stopping:
            woken = self._wake
            try:
                if await self.step():
                    continue
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the database went away: wait and try again
                log_failure("worker.step_error", error, worker=self.id)
            if self._stopping or woken.is_set():
                continue
            await self._idle(self.settings.worker_poll_seconds, woken)

    async def _idle(self, poll: float, woken: asyncio.Event) -> None:
        """Sleep until `woken` is set (at once if it was meanwhile), the next row comes due, or
        `poll` has passed."""
        timeout = poll
        with contextlib.suppress(Exception):
            async with transaction(self.ctx.sessionmaker) as session:
                due = await claims.seconds_until_next_due(session)
            if due is not None:
                timeout = min(poll, due + 0.05)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), timeout=timeout)

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    libpq_url(self._database_url),
                    autocommit=True,
                    application_name=WORKER_APPLICATION_NAME,
                ) as connection:
                    await connection.execute(f"LISTEN {WORK_CHANNEL}")
                    self.wake()  # catch up with anything committed while not listening
                    async for _notice in connection.notifies():
                        self.wake()
            except psycopg.Error as error:
                log.warning("worker.listen_failed", error=first_line(error))
                await asyncio.sleep(1.0)

    async def _maintain(self) -> None:
        while True:
            try:
                await jobs.maintain(self.ctx)
            except Exception as error:  # retried at the next interval
                log_failure("worker.maintenance_error", error)
            await asyncio.sleep(self.settings.worker_purge_interval_seconds)

    async def _sweep_cancels(self) -> None:
        """Cancels at Gemini still pending, of any project: at the start (a start often follows
        a key's fix), then at every upkeep interval, at once again after a full pass that all
        went through, and never before the end of a 429's pause on this process's calls."""
        interval = self.settings.worker_purge_interval_seconds
        while True:
            wait = interval
            try:
                wait = (await jobs.sweep_cancels(self.ctx)).next_in(interval)
            except Exception as error:  # retried at the next interval
                log_failure("worker.cancel_sweep_error", error)
            if wait > 0:
                await asyncio.sleep(wait)

    async def _rescan_first(self, stop: asyncio.Event) -> None:
        """The redaction pass after a rules upgrade, before the lanes start (app/worker/rescan.py):
        a lane that compressed an observation stored before the upgrade while the pass had not
        reached it wrote the secret into a summary flattened onto one line, where no rule finds
        it. While another worker runs the pass, wait for it. One statement when none is due. A
        pass that fails (the database unreachable) is retried, 1 s doubling to 30 s, and the
        lanes wait: started, they would compress the rows the pass had not reached (they could
        not reach the database either)."""
        stopped = asyncio.create_task(stop.wait())
        retry = 1.0
        try:
            while not stop.is_set():
                run = asyncio.create_task(rescan.rescan_if_pending(self.ctx.sessionmaker, self.id))
                # A stop does not wait for the pass (minutes on a big database; the grace is
                # 10 s): cancelled, it gives its claim back and the next start resumes it.
                await asyncio.wait({run, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not run.done():
                    run.cancel()
                    await asyncio.gather(run, return_exceptions=True)
                    return
                try:
                    run.result()
                    if not await rescan.running_elsewhere(self.ctx.sessionmaker):
                        return
                except Exception as error:
                    log_failure("worker.rescan_error", error, retry_seconds=retry)
                    await asyncio.wait({stopped}, timeout=retry)
                    retry = min(retry * 2, 30.0)
                    continue
                await asyncio.wait({stopped}, timeout=1.0)
        finally:
            stopped.cancel()

    async def _rescan(self) -> None:
        """The periodic check: a pass whose worker died is taken over at once (its lock went with
        its connection)."""
        while True:
            await asyncio.sleep(self.settings.worker_purge_interval_seconds)
            try:
                await rescan.rescan_if_pending(self.ctx.sessionmaker, self.id)
            except Exception as error:  # retried at the next interval
                log_failure("worker.rescan_error", error)
