"""The embedding model: loaded once per worker, however many lanes want it first."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from app.config import Settings
from app.llm.embeddings import Embedder
from app.worker import jobs
from tests.conftest import make_settings
from tests.worker.builders import make_observation, make_session, row, worker_on


def test_lanes_embedding_at_once_share_one_load_of_the_model(
    db: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each lane that found `ctx.embedder` None loaded its own model: 2-4 loads at a worker's
    # start, and a stop then waited for all of them.
    loads: list[str] = []
    real_load = jobs.get_embedder

    def slow_load(settings: Settings) -> Embedder:
        loads.append("load")
        time.sleep(0.3)  # a model's load: long enough for every lane to come in meanwhile
        return real_load(settings)

    monkeypatch.setattr(jobs, "get_embedder", slow_load)
    make_session(db)
    make_observation(db, "o1")

    async def lanes_at_once() -> None:
        async with worker_on(make_settings(database_url=database_url), database_url) as worker:
            assert await worker.step()  # the compression, its index row not yet embedded
            await asyncio.gather(*(jobs.embed_batch(worker.ctx) for _ in range(4)))

    asyncio.run(lanes_at_once())
    assert loads == ["load"]
    embedded = row(db, "SELECT count(*) AS n FROM memory_chunks WHERE embedding IS NOT NULL")
    assert embedded["n"] >= 1
