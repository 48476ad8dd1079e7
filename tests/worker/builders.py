"""Small builders and a runner for worker tests: rows inserted straight into the real database,
and a worker driven until a condition on the database holds."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import psycopg
import pytest
import structlog

from app.config import Settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.logs import configure_logging
from app.worker.loop import Worker

PROJECT = "/home/dev/shop"

LONG_RESULT = "\n".join(
    f"line {n}: export function validateToken(token: string) {{ return verify(token, key{n}); }}"
    for n in range(1, 40)
)


def make_session(
    db: psycopg.Connection[Any],
    session_id: str = "s1",
    *,
    project_path: str = PROJECT,
    status: str = "active",
    user_prompt: str | None = "fix the token check",
) -> str:
    db.execute(
        "INSERT INTO sessions (id, project_path, status, user_prompt, ended_at) "
        "VALUES (%s, %s, %s, %s, CASE WHEN %s = 'ending' THEN now() END)",
        (session_id, project_path, status, user_prompt, status),
    )
    return session_id


def make_observation(
    db: psycopg.Connection[Any],
    observation_id: str,
    *,
    session_id: str = "s1",
    project_path: str = PROJECT,
    function_name: str = "read_file",
    args: Any = None,
    result: Any = LONG_RESULT,
    observation_type: str = "file_read",
    status: str = "captured",
) -> str:
    db.execute(
        "INSERT INTO observations (id, session_id, project_path, function_name, function_args, "
        "result, observation_type, status, result_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
        "now())",
        (
            observation_id,
            session_id,
            project_path,
            function_name,
            json.dumps(args if args is not None else {"path": f"src/{observation_id}.ts"}),
            json.dumps(result),
            observation_type,
            status,
        ),
    )
    return observation_id


def row(db: psycopg.Connection[Any], sql: str, *params: Any) -> dict[str, Any]:
    with db.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        found = cursor.execute(sql, params).fetchone()
    assert found is not None, sql
    return found


def rows(db: psycopg.Connection[Any], sql: str, *params: Any) -> list[dict[str, Any]]:
    with db.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        return cursor.execute(sql, params).fetchall()


@asynccontextmanager
async def worker_on(settings: Settings, database_url: str) -> AsyncIterator[Worker]:
    """A worker whose jobs a test calls one by one (`worker.ctx`), closed afterwards."""
    engine = make_async_engine(database_url, pool_size=2)
    try:
        worker = Worker(
            settings=settings, sessionmaker=make_sessionmaker(engine), database_url=database_url
        )
        try:
            yield worker
        finally:
            await worker.close()
    finally:
        await engine.dispose()


async def _drain(settings: Settings, database_url: str, concurrency: int | None) -> None:
    engine = make_async_engine(database_url, pool_size=4)
    try:
        worker = Worker(
            settings=settings,
            sessionmaker=make_sessionmaker(engine),
            database_url=database_url,
            concurrency=concurrency,
        )
        await worker.drain()
    finally:
        await engine.dispose()


def drain(settings: Settings, database_url: str, *, concurrency: int | None = None) -> None:
    """Run a fresh worker over everything due now, then stop."""
    asyncio.run(_drain(settings, database_url, concurrency))


async def run_until_async(
    settings: Settings,
    database_url: str,
    done: Callable[[], bool],
    *,
    timeout: float = 30.0,
    workers: int = 1,
    concurrency: int | None = None,
) -> float:
    """Run `workers` workers until `done()` holds; returns the seconds it took."""
    engine = make_async_engine(database_url, pool_size=8)
    stop = asyncio.Event()
    started = time.monotonic()
    try:
        running = [
            asyncio.create_task(
                Worker(
                    settings=settings,
                    sessionmaker=make_sessionmaker(engine),
                    database_url=database_url,
                    concurrency=concurrency,
                ).run(stop)
            )
            for _ in range(workers)
        ]
        while not done():
            if time.monotonic() - started > timeout:
                raise AssertionError(f"condition not reached within {timeout} s")
            await asyncio.sleep(0.02)
        elapsed = time.monotonic() - started
        stop.set()
        await asyncio.gather(*running)
        return elapsed
    finally:
        stop.set()
        await engine.dispose()


def run_until(settings: Settings, database_url: str, done: Callable[[], bool], **kw: Any) -> float:
    return asyncio.run(run_until_async(settings, database_url, done, **kw))


def log_to_stderr(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> None:
    """Log at info to stderr, through loggers made now for `modules`: a logger keeps the
    configuration of its first use, and an earlier test's (a CLI's at error) filtered warnings."""
    configure_logging("info")
    for module in modules:
        monkeypatch.setattr(module, "log", structlog.get_logger(module.__name__))
