"""`POST /api/sync` queues a run; `GET /api/sync/{runId}` reports it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import DbDep, SettingsDep
from app.sync import runs
from app.sync.schemas import SyncIn, SyncQueued

router = APIRouter(prefix="/api/sync", tags=["sync"])


@router.post("", status_code=202)
async def queue_sync(data: SyncIn, db: DbDep, settings: SettingsDep) -> dict[str, Any]:
    run_id = await runs.queue_run(db, data=data, settings=settings)
    return SyncQueued(run_id=str(run_id)).model_dump(by_alias=True)


@router.get("/{run_id}")
async def read_sync(run_id: str, db: DbDep) -> dict[str, Any]:
    run = await runs.read_run(db, run_id=run_id)
    return run.model_dump(by_alias=True)
