"""The embedding cache keeps the vectors of text that is still indexed, under every model, and
loses those of text no index row holds any more."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from app.worker import jobs
from tests.conftest import make_settings
from tests.worker.builders import worker_on

LOCAL = "local:wordllama-l2_supercat:256"
GEMINI = "gemini:gemini-embedding-001:768"


def cache(db: psycopg.Connection[Any], hash_: str, model: str, age: str) -> None:
    width = int(model.rsplit(":", 1)[1])
    db.execute(
        "INSERT INTO memory_embedding_cache (hash, model, embedding, created_at) "
        "VALUES (%s, %s, %s::vector, now() - %s::interval)",
        (hash_, model, "[" + ",".join(["0.5"] * width) + "]", age),
    )


def test_the_worker_drops_cached_vectors_of_text_no_row_holds_after_a_grace(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # A transcript that grows changes its last chunk at every sync: each sync left the old
    # tail's vector in the cache for good (walk-through: 30 appends, 29 orphans), a row a sync
    # under `sync --watch`, 1 KB each with wordllama, 3 KB with Gemini at 768.
    db.execute(
        "INSERT INTO memories (id, scope, key, value) "
        "VALUES ('00000000-0000-0000-0000-000000000001', 'global', 'k', '1')"
    )
    db.execute(
        "INSERT INTO memory_chunks (project_path, source, memory_id, content, hash) "
        "VALUES ('', 'kv', '00000000-0000-0000-0000-000000000001', 'kept', 'live')"
    )
    cache(db, "live", LOCAL, "3 days")  # text still indexed
    cache(db, "live", GEMINI, "3 days")  # under the model before the switch: kept for going back
    cache(db, "gone", LOCAL, "3 days")  # text no row holds any more
    cache(db, "gone", GEMINI, "3 days")
    cache(db, "new", LOCAL, "1 minute")  # a sync may be about to write its rows

    async def go() -> None:
        async with worker_on(make_settings(), database_url) as worker:
            await jobs.maintain(worker.ctx)

    asyncio.run(go())

    left = db.execute("SELECT hash, model FROM memory_embedding_cache ORDER BY 1, 2").fetchall()
    assert left == [("live", GEMINI), ("live", LOCAL), ("new", LOCAL)]
