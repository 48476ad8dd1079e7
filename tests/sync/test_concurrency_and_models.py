from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.config import Settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.index.embedding import embed_pending_chunks, vector_literal
from app.sync.connections import SyncConnections
from app.sync.indexer import SyncRequest, sync_project
from app.sync.report import SyncReport
from tests.conftest import RESET_APPLICATION_NAME, make_settings
from tests.fakes.gemini import fake_gemini
from tests.sync.helpers import CountingEmbedder, make_project, on_engine, run_sync
from tests.sync.test_gemini_sync import gemini as gemini_provider
from tests.sync.test_gemini_sync import inline_answer


def test_two_concurrent_syncs_of_one_project_neither_corrupt_nor_duplicate(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()

    async def go() -> list[SyncReport]:
        engines = [make_async_engine(database_url) for _ in range(2)]
        try:
            request = SyncRequest(project_path=str(project))
            return list(
                await asyncio.gather(
                    *(
                        sync_project(make_sessionmaker(e), settings, embedder, request)
                        for e in engines
                    )
                )
            )
        finally:
            for engine in engines:
                await engine.dispose()

    reports = asyncio.run(go())

    # The advisory lock serialised them: one indexed everything, the other found it done.
    assert sorted(r.files_changed for r in reports) == [0, 6]
    assert db.execute("SELECT count(*) FROM memory_files").fetchone() == (6,)
    duplicates = db.execute(
        "SELECT count(*) FROM (SELECT file_id, start_line, end_line, hash FROM memory_chunks "
        "GROUP BY 1, 2, 3, 4 HAVING count(*) > 1) AS d"
    ).fetchone()
    assert duplicates == (0,)
    chunks = db.execute("SELECT count(*) FROM memory_chunks").fetchone()
    recorded = db.execute("SELECT sum(chunk_count)::int FROM memory_files").fetchone()
    assert chunks == recorded == (max(r.chunks_written for r in reports),)


def synced_locally(database_url: str, tmp_path: Path) -> tuple[Path, CountingEmbedder]:
    """A project synced with the local model: the state before a switch."""
    project = make_project(tmp_path / "proj")
    local = CountingEmbedder()
    run_sync(database_url, make_settings(home=tmp_path / "h"), local, project)
    return project, local


def test_model_switch_keeps_old_vectors_searchable_until_reembed(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project, local = synced_locally(database_url, tmp_path)

    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", inline_answer)
        settings, gemini = gemini_provider(fake, tmp_path, gemini_embed_batch_threshold=1_000_000)
        target = project / "memory" / "a.md"
        target.write_text(target.read_text() + "\n## New\n\nswitched models today\n")

        switched = run_sync(database_url, settings, gemini, project)

        models = dict(
            db.execute("SELECT model, count(*) FROM memory_chunks GROUP BY model").fetchall()
        )
        assert set(models) == {local.identity, gemini.identity}
        assert models[gemini.identity] == switched.chunks_written
        # The old rows are still found through their own model's HNSW index.
        query = vector_literal(local.embed_query("memory bank progress checklist"))
        db.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in db.execute(
                "EXPLAIN SELECT id FROM memory_chunks WHERE model = %s "
                "ORDER BY embedding::halfvec(256) <=> %s::halfvec(256) LIMIT 5",
                (local.identity, query),
            )
        )
        assert "ix_memory_chunks_hnsw_local" in plan
        found = db.execute(
            "SELECT count(*) FROM (SELECT id FROM memory_chunks WHERE model = %s "
            "ORDER BY embedding::halfvec(256) <=> %s::halfvec(256) LIMIT 5) AS t",
            (local.identity, query),
        ).fetchone()
        assert found == (5,)
        db.execute("RESET enable_seqscan")

        migrated = run_sync(database_url, settings, gemini, project, reembed=True)

    assert migrated.files_changed == 0
    assert migrated.chunks_reembedded == models[local.identity]
    left = db.execute("SELECT model, count(*) FROM memory_chunks GROUP BY model").fetchall()
    assert left == [(gemini.identity, sum(models.values()))]
    index = db.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memory_chunks_hnsw_gemini_gemini_"
        "embedding_001_768'"
    ).fetchone()
    assert index is not None
    assert "halfvec(768)" in index[0]


def test_a_failed_write_on_the_lock_connection_rolls_back_and_frees_the_lock(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    embedder = CountingEmbedder()
    run_sync(database_url, settings, embedder, project)
    files = "SELECT path, hash, chunk_count FROM memory_files ORDER BY path"
    before = db.execute(files).fetchall()
    chunks_before = db.execute("SELECT count(*) FROM memory_chunks").fetchone()
    for name in ("MEMORY.md", "a.md"):  # one file in each of the two writers' transactions
        path = next(project.rglob(name))
        path.write_text(path.read_text() + "\n\nThe release branch is cut on Mondays.\n")
    # Postgres refuses the new rows: a write transaction fails after its first statements.
    db.execute(
        "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN RAISE EXCEPTION 'refused'; END $$"
    )
    db.execute(
        "CREATE TRIGGER test_refuse BEFORE INSERT ON memory_chunks FOR EACH ROW "
        "EXECUTE FUNCTION test_refuse()"
    )
    try:
        with pytest.raises(psycopg.errors.RaiseException, match="refused"):
            run_sync(database_url, settings, embedder, project)
        # Nothing of the failed transactions stays, and no advisory lock is left held.
        assert db.execute(files).fetchall() == before
        assert db.execute("SELECT count(*) FROM memory_chunks").fetchone() == chunks_before
        held = db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
        assert held == (0,)
    finally:
        db.execute("DROP TRIGGER test_refuse ON memory_chunks")
        db.execute("DROP FUNCTION test_refuse()")

    report = run_sync(database_url, settings, embedder, project)

    assert report.files_changed == 2
    chunks = db.execute("SELECT count(*) FROM memory_chunks").fetchone()
    assert chunks == db.execute("SELECT sum(chunk_count)::int FROM memory_files").fetchone()


def test_a_sync_works_through_its_own_connections_that_do_not_wait_for_the_wal(
    database_url: str, db: psycopg.Connection[Any], settings: Settings, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    others = (
        "SELECT application_name FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = "
        "'client backend' AND application_name <> %s"  # the db fixture's kept connection
    )
    seen: list[str] = []

    class Watching(CountingEmbedder):
        def embed_documents(self, texts: list[str]) -> Any:
            # Called while the sync holds its lock and writes: who is connected then.
            seen.extend(row[0] for row in db.execute(others, [RESET_APPLICATION_NAME]))
            return super().embed_documents(texts)

    report = run_sync(database_url, settings, Watching(), project)

    assert report.files_changed == 6
    # The lock's connection and the second writer's, none of the engine's pool ("agmem").
    assert set(seen) == {"agmem-sync"}

    async def commit_setting() -> str:
        connection = await SyncConnections(database_url).acquire()
        try:
            row = await (await connection.execute("SHOW synchronous_commit")).fetchone()
            return str(row[0]) if row else ""
        finally:
            await connection.close()

    assert asyncio.run(commit_setting()) == "off"


def test_reembed_migrates_the_projects_captured_rows_and_global_memories_too(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Observations, summaries and kv memories are written by the API and embedded by the
    # worker; `--reembed` took only file chunks, so after a switch everything captured before
    # it stayed on the old model, out of the vector branch's reach for good.
    project, local = synced_locally(database_url, tmp_path)
    for number, (scope, owner) in enumerate(
        [("project", str(project)), ("global", ""), ("project", "/elsewhere")]
    ):
        memory = f"00000000-0000-0000-0000-00000000000{number}"
        db.execute(
            "INSERT INTO memories (id, scope, project_path, key, value) "
            "VALUES (%s, %s, %s, %s, '1')",
            (memory, scope, owner, f"k{number}"),
        )
        db.execute(
            "INSERT INTO memory_chunks (project_path, source, memory_id, content, hash) "
            "VALUES (%s, 'kv', %s, %s, md5(%s))",
            (owner, memory, f"memory {number} of {owner}", str(number)),
        )
    on_engine(database_url, lambda sessionmaker: embed_all(sessionmaker, local))

    with fake_gemini() as fake:
        fake.on(":batchEmbedContents", inline_answer)
        settings, gemini = gemini_provider(fake, tmp_path, gemini_embed_batch_threshold=1_000_000)
        migrated = run_sync(database_url, settings, gemini, project, reembed=True)

    left = dict(
        db.execute(
            "SELECT project_path, array_agg(DISTINCT model) FROM memory_chunks GROUP BY 1"
        ).fetchall()
    )
    assert left == {
        str(project): [gemini.identity],
        "": [gemini.identity],
        "/elsewhere": [local.identity],  # another project's rows wait for its own --reembed
    }
    assert migrated.chunks_reembedded == sum(
        count
        for (count,) in db.execute(
            "SELECT count(*) FROM memory_chunks WHERE model = %s", (gemini.identity,)
        )
    )


async def embed_all(sessionmaker: Any, embedder: CountingEmbedder) -> None:
    async with sessionmaker() as session, session.begin():
        await embed_pending_chunks(session, embedder)
