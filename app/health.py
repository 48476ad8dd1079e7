"""GET /health: the database, pgvector, the embedding model and the worker's backlog, truthfully."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.deps import StateDep
from app.api.middleware import authorized, expected_authorization
from app.errors import DatabaseUnavailable, first_line
from app.llm.embeddings import describe_embedding
from app.worker.metrics import (
    METRICS_SQL,
    TOKENS_BY_PROJECT_SQL,
    WORKER_APPLICATION_NAME,
    shape_metrics,
)

router = APIRouter(tags=["health"])

# The worker processes listening for work on this database: each holds one connection by this
# name while it runs (app/worker/loop.py). One read of the server's shared memory, no table.
WORKERS_SQL = text(
    "SELECT count(*) FROM pg_stat_activity "
    f"WHERE datname = current_database() AND application_name = '{WORKER_APPLICATION_NAME}'"
)


async def read_database_facts(session: AsyncSession, *, by_project: bool) -> dict[str, Any]:
    """Server version, pgvector version and the worker's backlog and results; the tokens saved
    by project only when `by_project` (a GROUP BY over every compressed observation)."""
    version = (await session.execute(text("SHOW server_version"))).scalar_one()
    pgvector = (
        await session.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'"))
    ).scalar_one_or_none()
    counts = (await session.execute(METRICS_SQL)).one()
    projects = (await session.execute(TOKENS_BY_PROJECT_SQL)).all() if by_project else []
    worker = shape_metrics(counts, projects)
    if not by_project:
        del worker["tokensSavedByProject"]
    worker["running"] = (await session.execute(WORKERS_SQL)).scalar_one()
    return {"postgres": str(version).split(" ")[0], "pgvector": pgvector, "worker": worker}


def problems(facts: dict[str, Any], storage: tuple[str, float] | None) -> list[str]:
    """What makes the service less than ok, one line each: a request the database refused for
    want of room or a working disk lately, and work waiting with no worker to do it (before,
    only `oldestPendingSeconds` growing showed that)."""
    found: list[str] = []
    if facts["pgvector"] is None:
        found.append("the pgvector extension is not installed: no vector search")
    if storage is not None:
        detail, age = storage
        found.append(f"the database refused a request {age:.0f} s ago: {detail}")
    worker = facts["worker"]
    if worker["running"] == 0 and worker["pending"] > 0:
        found.append(
            f"no worker is running: {worker['pending']} jobs wait "
            "(start `agmem worker`, or `agmem serve` without --no-worker)"
        )
    return found


@router.get("/health")
async def health(request: Request, state: StateDep) -> JSONResponse:
    """Liveness and readiness in one: 200 when the database answers, 503 when it does not.

    It stays open for probes. With a token set, only a caller presenting it gets the tokens
    saved by project (that listed every project's path to anyone who could reach the port) and
    why the database is unreachable."""
    embedding = describe_embedding(state.settings)
    trusted = authorized(request.scope, expected_authorization(state.settings.api_token))
    try:
        async with state.sessionmaker() as session:
            facts = await read_database_facts(session, by_project=trusted)
    except Exception as error:  # any failure to reach or query the database means "not ready"
        # The reason names the socket's folder or a remote database's host, port and user; with
        # a token set, only a caller presenting it sees that.
        reason = f": {first_line(error)}" if trusted else ""
        supervisor = state.supervisor if trusted else None
        restarting = supervisor.describe() if supervisor is not None else None
        return JSONResponse(
            {
                "status": "unavailable",
                "database": f"unreachable{reason}",
                "pgvector": None,
                "embedding": embedding,
                "error": DatabaseUnavailable.wire_name,
                "detail": f"the database is unreachable ({restarting}); retry shortly"
                if restarting
                else "the database is unreachable; retry shortly",
            },
            status_code=503,
            headers={"Retry-After": "5"},
        )
    found = problems(facts, state.storage_refusals.recent(time.monotonic()))
    return JSONResponse(
        {
            "status": "degraded" if found else "ok",
            "database": "ok",
            "postgres": facts["postgres"],
            "pgvector": facts["pgvector"],
            "embedding": embedding,
            "worker": facts["worker"],
            "problems": found,
        }
    )
