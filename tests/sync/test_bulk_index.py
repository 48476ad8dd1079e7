from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.engine import make_async_engine, make_sessionmaker
from app.db.vector_index import hnsw_index_name
from app.llm.embeddings import local_embedder
from app.sync import bulk_index
from app.sync.bulk_index import end_bulk_index
from app.sync.indexer import SyncRequest, sync_project
from tests.cli.helpers import run_agmem
from tests.conftest import libpq_url, make_settings
from tests.sync.helpers import CountingEmbedder, make_project, on_engine, run_sync

INDEX = hnsw_index_name(local_embedder().identity)


def index_state(db: psycopg.Connection[Any]) -> tuple[int, bool] | None:
    """(oid, valid) of the local model's HNSW index: a rebuilt index has a new oid."""
    row = db.execute(
        "SELECT c.oid::int, i.indisvalid FROM pg_class c JOIN pg_index i "
        "ON i.indexrelid = c.oid WHERE c.relname = %s",
        (INDEX,),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def test_large_initial_sync_builds_the_index_once_with_every_vector(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    before = index_state(db)
    settings = make_settings(home=tmp_path / "home", sync_bulk_index_min_chunks=1)
    project = make_project(tmp_path / "proj")

    report = run_sync(database_url, settings, CountingEmbedder(), project)

    after = index_state(db)
    assert before is not None
    assert after is not None
    assert after[0] != before[0]  # dropped and built again
    assert after[1] is True
    rows = db.execute(
        "SELECT content, embedding::text, model FROM memory_chunks ORDER BY id"
    ).fetchall()
    assert len(rows) == report.chunks_written > 0
    assert {r[2] for r in rows} == {local_embedder().identity}
    # The vectors went over in binary: they are the model's, float for float.
    stored = np.array([[float(x) for x in r[1][1:-1].split(",")] for r in rows[:5]])
    expected = local_embedder().embed_documents([r[0] for r in rows[:5]])
    np.testing.assert_allclose(stored, expected, atol=1e-6)
    # The rebuilt index serves the model's nearest-neighbour query.
    db.execute("SET enable_seqscan = off")
    plan = db.execute(
        "EXPLAIN SELECT id FROM memory_chunks WHERE model = %s "
        "ORDER BY embedding::halfvec(256) <=> %s::halfvec(256) LIMIT 5",
        (local_embedder().identity, rows[0][1]),
    ).fetchall()
    db.execute("RESET enable_seqscan")
    assert INDEX in " ".join(line[0] for line in plan)


def test_index_holding_other_projects_rows_is_kept_row_by_row(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    first = make_project(tmp_path / "first")
    run_sync(database_url, make_settings(home=tmp_path / "home"), CountingEmbedder(), first)
    kept = index_state(db)
    indexed = db.execute("SELECT count(*) FROM memory_chunks WHERE model IS NOT NULL").fetchone()
    assert indexed is not None
    assert indexed[0] > 1

    # The second project qualifies by size, but the index already covers more rows than allowed.
    settings = make_settings(
        home=tmp_path / "home", sync_bulk_index_min_chunks=1, sync_bulk_index_max_rows=1
    )
    run_sync(database_url, settings, CountingEmbedder(), make_project(tmp_path / "second"))

    assert index_state(db) == kept


def test_small_sync_keeps_the_index(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    before = index_state(db)
    settings = make_settings(home=tmp_path / "home")  # default: at least 2,000 chunks expected

    run_sync(database_url, settings, CountingEmbedder(), make_project(tmp_path / "proj"))

    assert index_state(db) == before


class Aborted(BaseException):
    """Escapes every `except Exception`, like a cancellation would."""


class AbortingEmbedder(CountingEmbedder):
    def embed_documents(self, texts: list[str]) -> Any:
        raise Aborted


def test_an_aborted_bulk_sync_still_rebuilds_the_index(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    settings = make_settings(home=tmp_path / "home", sync_bulk_index_min_chunks=1)

    with pytest.raises(Aborted):
        run_sync(database_url, settings, AbortingEmbedder(), make_project(tmp_path / "proj"))

    state = index_state(db)
    assert state is not None
    assert state[1] is True


def test_an_invalid_leftover_index_is_dropped_and_built_again(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # What an interrupted CREATE INDEX CONCURRENTLY leaves: the name taken, the index unusable.
    db.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (INDEX,))
    before = index_state(db)
    assert before is not None
    assert before[1] is False

    on_engine(database_url, lambda sessionmaker: end_bulk_index(sessionmaker, local_embedder()))

    after = index_state(db)
    assert after is not None
    assert after[1] is True
    assert after[0] != before[0]


def test_concurrent_bulk_syncs_finish_and_leave_one_valid_index(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Same project twice (the second waits on the project lock while the first rebuilds the
    # index: a blocked lock statement's snapshot would stall CREATE INDEX CONCURRENTLY), and a
    # third project at the same time (its own drop and rebuild race the first's).
    settings = make_settings(home=tmp_path / "home", sync_bulk_index_min_chunks=1)
    shared = make_project(tmp_path / "shared")
    other = make_project(tmp_path / "other")
    embedder = CountingEmbedder()

    async def go() -> list[Any]:
        engines = [make_async_engine(database_url) for _ in range(3)]
        try:
            return list(
                await asyncio.gather(
                    *(
                        sync_project(
                            make_sessionmaker(engine),
                            settings,
                            embedder,
                            SyncRequest(project_path=str(project)),
                        )
                        for engine, project in zip(engines, (shared, shared, other), strict=True)
                    )
                )
            )
        finally:
            for engine in engines:
                await engine.dispose()

    reports = asyncio.run(asyncio.wait_for(go(), timeout=90))

    assert sorted(r.files_changed for r in reports) == [0, 6, 6]
    state = index_state(db)
    assert state is not None
    assert state[1] is True
    unembedded = db.execute("SELECT count(*) FROM memory_chunks WHERE embedding IS NULL")
    assert unembedded.fetchone() == (0,)


def test_a_stop_during_the_build_waits_for_it_then_goes_on(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Ctrl-C, the watch's stop or the worker's cancel while the index was built cut the CREATE
    # INDEX CONCURRENTLY short: an invalid index no later sync dropped once the model held more
    # rows than a bulk build takes (the review of cli13).
    run_sync(
        database_url,
        make_settings(home=tmp_path / "home"),
        CountingEmbedder(),
        make_project(tmp_path / "proj"),
    )
    db.execute(f"DROP INDEX {INDEX}")  # as begin_bulk_index leaves it

    async def stopped_while_building(sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        build = asyncio.ensure_future(end_bulk_index(sessionmaker, local_embedder()))
        await asyncio.sleep(0)
        build.cancel()
        with pytest.raises(asyncio.CancelledError):
            await build

    on_engine(database_url, stopped_while_building)

    state = index_state(db)
    assert state is not None
    assert state[1] is True


@pytest.mark.parametrize("changed", [True, False])
def test_an_invalid_index_is_rebuilt_by_the_next_sync_of_any_size(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, changed: bool
) -> None:
    # What SIGTERM or a second Ctrl-C during a build leaves. No bulk build would come to drop
    # it (off here, as it is once the model holds more rows than AGMEM_SYNC_BULK_INDEX_MAX_ROWS);
    # Postgres kept updating it on every write and never used it. A fresh process, as a new sync
    # is; one with nothing to index (the watch restarted on an unchanged project) left it so.
    project = make_project(tmp_path / "proj")
    env = {"DATABASE_URL": database_url, "AGMEM_HOME": str(tmp_path / "home")}
    # The first sync only builds the index; in this process (an `agmem sync` costs ~5 s of CPU).
    run_sync(database_url, make_settings(home=tmp_path / "home"), local_embedder(), project)
    assert index_state(db) is not None
    db.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (INDEX,))
    before = index_state(db)
    if changed:
        (project / "MEMORY.md").write_text("# Notes\n\nThe shop's API listens on port 8080.\n")

    synced = run_agmem("sync", "-p", str(project), **env, AGMEM_SYNC_BULK_INDEX_MIN_CHUNKS="0")

    assert synced.returncode == 0, synced.stderr
    after = index_state(db)
    assert before is not None
    assert after is not None
    assert after[1] is True
    assert after[0] != before[0]


def test_a_sync_does_not_wait_on_another_process_building_the_index(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A build in progress shows the index invalid, under the model's lock: the check of a sync
    # of another project is no leftover to repair, and it waited for the whole build.
    settings = make_settings(home=tmp_path / "home", sync_bulk_index_min_chunks=0)
    run_sync(database_url, settings, CountingEmbedder(), make_project(tmp_path / "a"))
    monkeypatch.setattr(bulk_index, "_checked", set())  # a fresh process
    key = "agmem.hnsw:" + local_embedder().identity
    with psycopg.connect(libpq_url(database_url), autocommit=True) as builder:
        builder.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        db.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (INDEX,)
        )
        try:
            request = SyncRequest(project_path=str(make_project(tmp_path / "b")))
            on_engine(
                database_url,
                lambda sessionmaker: sync_project(
                    sessionmaker, settings, CountingEmbedder(), request
                ),
                timeout=10,
            )
            assert local_embedder().identity not in bulk_index._checked  # looked at again later
        finally:
            db.execute(
                "UPDATE pg_index SET indisvalid = true WHERE indexrelid = %s::regclass", (INDEX,)
            )
