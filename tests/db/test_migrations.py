"""The schema comes from Alembic: it goes up, down and up again, and matches the models."""

from __future__ import annotations

import threading
import time
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from alembic.script import ScriptDirectory

from alembic import command
from app.db import migrate
from app.db.engine import make_sync_engine
from app.db.models import Base
from tests.conftest import libpq_url
from tests.postgres import PostgresServer, create_database, drop_database


@pytest.fixture
def scratch_url(pg_server: PostgresServer) -> Iterator[str]:
    url = create_database(pg_server, prefix="agmem_migrations")
    yield url
    drop_database(pg_server, url)


@pytest.fixture(scope="module")
def migrated_url(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh database upgraded to head once, for the tests that only read its schema (each
    upgrade of an empty database costs ~0.5 s)."""
    url = create_database(pg_server, prefix="agmem_migrations")
    migrate.upgrade(url)
    yield url
    drop_database(pg_server, url)


def tables(url: str) -> set[str]:
    with psycopg.connect(libpq_url(url)) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {row[0] for row in rows}


def indexes(url: str) -> dict[str, str]:
    with psycopg.connect(libpq_url(url)) as connection:
        rows = connection.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
        ).fetchall()
    return {str(name): str(definition) for name, definition in rows}


def test_upgrade_downgrade_upgrade(scratch_url: str) -> None:
    migrate.upgrade(scratch_url)
    assert set(Base.metadata.tables) <= tables(scratch_url)
    assert migrate.current_revision(scratch_url) == migrate.head_revision()

    migrate.downgrade(scratch_url, "base")
    assert tables(scratch_url) == {"alembic_version"}
    assert migrate.current_revision(scratch_url) is None

    migrate.upgrade(scratch_url)
    assert set(Base.metadata.tables) <= tables(scratch_url)


def test_no_drift_between_models_and_migrations(migrated_url: str) -> None:
    assert migrate.check(migrated_url) is None


def test_search_indexes_name_their_operator_class(migrated_url: str) -> None:
    found = indexes(migrated_url)

    hnsw = found["ix_memory_chunks_hnsw_local_wordllama_l2_supercat_256"]
    assert "USING hnsw (((embedding)::halfvec(256)) halfvec_cosine_ops)" in hnsw
    assert "WHERE ((model)::text = 'local:wordllama-l2_supercat:256'::text)" in hnsw
    assert "USING gin (tsv)" in found["ix_memory_chunks_tsv"]
    with psycopg.connect(libpq_url(migrated_url)) as connection:
        options = connection.execute(
            "SELECT reloptions FROM pg_class WHERE relname = 'memory_chunks'"
        ).fetchone()
    assert options == (["toast_tuple_target=8160"],)


def test_every_table_carries_the_project_key_but_the_content_addressed_cache(
    migrated_url: str,
) -> None:
    with psycopg.connect(libpq_url(migrated_url)) as connection:
        rows = connection.execute(
            "SELECT table_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND column_name = 'project_path'"
        ).fetchall()
    with_project = {row[0] for row in rows}

    # The cache is content-addressed; the redaction state is one row about every project.
    assert set(Base.metadata.tables) - with_project == {"memory_embedding_cache", "redaction_state"}


def test_0005_leaves_every_stored_row_pending_a_rescan(scratch_url: str) -> None:
    migrate.upgrade(scratch_url, "0004")
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO memories (scope, key, value) VALUES ('global', 'k', '\"password: x1\"')"
        )
        connection.execute(
            "INSERT INTO sessions (id, project_path, user_prompt) VALUES ('s', '/p', 'token: x1')"
        )
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        state = connection.execute("SELECT id, rules, claimed_by FROM redaction_state").fetchall()
        # Rows stored under unknown rules: the first worker rescans them.
        assert state == [(1, None, None)]
        kept = connection.execute("SELECT value FROM memories").fetchone()
        assert kept == ("password: x1",)  # the migration itself redacts nothing
    migrate.downgrade(scratch_url, "0004")
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        assert connection.execute("SELECT to_regclass('redaction_state')").fetchone() == (None,)
        assert connection.execute("SELECT user_prompt FROM sessions").fetchone() == ("token: x1",)


def test_0006_keeps_the_state_and_counts_it_older_than_any_build(scratch_url: str) -> None:
    migrate.upgrade(scratch_url, "0005")
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute("UPDATE redaction_state SET rules = 'abcd', redacted_at = now()")
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        state = connection.execute("SELECT rules, generation FROM redaction_state").fetchall()
        assert state == [("abcd", None)]  # NULL: any build rescans it once
    migrate.downgrade(scratch_url, "0005")
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        assert connection.execute("SELECT rules FROM redaction_state").fetchall() == [("abcd",)]


def test_0007_leaves_superseded_jobs_to_cancel_and_its_downgrade_keeps_the_outcome(
    scratch_url: str,
) -> None:
    migrate.upgrade(scratch_url, "0006")
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO embedding_batches (project_path, model, provider_job, hashes, status, "
            "last_error) VALUES "
            "('/p', 'gemini:a:768', 'batches/old', '[]', 'failed', 'superseded: the embedding "
            "model is now local:x:256'), "
            "('/p', 'gemini:a:768', NULL, '[]', 'failed', 'superseded: the embedding model is "
            "now local:x:256'), "
            "('/p', 'gemini:a:768', 'batches/gone', '[]', 'failed', 'Gemini batch ended'), "
            "('/p', 'gemini:a:768', 'batches/run', '[]', 'submitted', NULL)"
        )
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT provider_job, cancel_status, cancel_requested_at IS NOT NULL "
            "FROM embedding_batches ORDER BY provider_job"
        ).fetchall()
        # Only a superseded job with a remote name is one to cancel: the others ended or run.
        assert rows == [
            ("batches/gone", None, False),
            ("batches/old", "pending", True),
            ("batches/run", None, False),
            (None, None, False),
        ]
        connection.execute(
            "UPDATE embedding_batches SET cancel_status = 'ended', cancel_settled_at = now(), "
            "cancel_error = 'cancel refused: 400 FAILED_PRECONDITION' "
            "WHERE provider_job = 'batches/old'"
        )
    migrate.downgrade(scratch_url, "0006")
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        kept = connection.execute(
            "SELECT last_error FROM embedding_batches WHERE provider_job = 'batches/old'"
        ).fetchone()
    assert kept == (
        "superseded: the embedding model is now local:x:256; "
        "cancel ended: cancel refused: 400 FAILED_PRECONDITION",
    )


def test_0010_stores_keys_nfc_and_keeps_each_twins_value_under_its_own_name(
    scratch_url: str,
) -> None:
    migrate.upgrade(scratch_url, "0009")
    nfc, nfd = "project.caf\u00e9", "project.cafe\u0301"
    # Four spellings of one key: NFC, NFD, and two partly composed; ranked by their last write.
    dots = ["k.\u1e69", "k.s\u0323\u0307", "k.\u1e61\u0323", "k.\u1e63\u0307"]
    # At the bounds (500 characters, 800 bytes): a suffixed name must shorten its stem.
    long_chars = "k." + "a" * 496 + "\u00e9"
    long_bytes = "k." + "\u4e2d" * 260 + "\u00e9"
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO memories (scope, project_path, key, value) VALUES "
            "('project', '/a', %(nfd)s, '\"alone\"'), "
            "('project', '/b', %(nfc)s, '\"composed\"'), "
            "('project', '/b', %(nfd)s, '\"decomposed\"'), "
            "('project', '/c', %(ascii)s, '\"plain\"'), "
            "('project', '/e', %(long_chars)s, '\"long composed\"'), "
            "('project', '/e', %(long_chars_nfd)s, '\"long decomposed\"'), "
            "('project', '/f', %(long_bytes)s, '\"wide composed\"'), "
            "('project', '/f', %(long_bytes_nfd)s, '\"wide decomposed\"')",
            {
                "nfc": nfc,
                "nfd": nfd,
                "ascii": "project.cafe",
                "long_chars": long_chars,
                "long_chars_nfd": long_chars[:-1] + "e\u0301",
                "long_bytes": long_bytes,
                "long_bytes_nfd": long_bytes[:-1] + "e\u0301",
            },
        )
        for age, key in enumerate(dots):
            connection.execute(
                "INSERT INTO memories (scope, project_path, key, value, updated_at) "
                "VALUES ('project', '/d', %s, %s, now() - make_interval(mins => %s))",
                (key, f'"dots {age}"', age),
            )
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        rows = connection.execute("SELECT project_path, key, value FROM memories").fetchall()
        left_unnormalized = connection.execute(
            "SELECT count(*) FROM memories WHERE key IS NOT NFC NORMALIZED"
        ).fetchone()
    suffix = " (duplicate spelling)"
    assert sorted(rows) == sorted(
        [
            ("/a", nfc, "alone"),
            ("/b", nfc, "composed"),
            ("/b", f"{nfc}{suffix}", "decomposed"),
            ("/c", "project.cafe", "plain"),
            ("/d", dots[0], "dots 0"),
            ("/d", f"{dots[0]}{suffix}", "dots 1"),
            ("/d", f"{dots[0]} (duplicate spelling 2)", "dots 2"),
            ("/d", f"{dots[0]} (duplicate spelling 3)", "dots 3"),
            ("/e", long_chars, "long composed"),
            ("/e", long_chars[: 500 - len(suffix)] + suffix, "long decomposed"),
            ("/f", long_bytes, "wide composed"),
            ("/f", long_bytes[: 2 + (800 - 2 - len(suffix)) // 3] + suffix, "wide decomposed"),
        ]
    )
    assert left_unnormalized == (0,)


def test_both_extensions_where_available(migrated_url: str) -> None:
    with psycopg.connect(libpq_url(migrated_url)) as connection:
        installed = {r[0] for r in connection.execute("SELECT extname FROM pg_extension")}
        available = {r[0] for r in connection.execute("SELECT name FROM pg_available_extensions")}

    assert "vector" in installed
    assert ("pgcrypto" in installed) == ("pgcrypto" in available)


def test_raw_payload_columns_are_stored_uncompressed_out_of_line(database_url: str) -> None:
    """Capture's speed relies on it: no pglz compression of each payload (see the migration)."""
    with psycopg.connect(libpq_url(database_url)) as connection:
        rows = connection.execute(
            "SELECT attname, attstorage FROM pg_attribute "
            "WHERE attrelid = 'observations'::regclass AND attname IN ('function_args', 'result')"
        ).fetchall()
    assert dict(rows) == {"function_args": "e", "result": "e"}


# The owner indexes are partial (`col IS NOT NULL`); each way rows are found by owner must still
# be able to use them: the sync's `= ANY` lookups and deletes, and the statement a foreign key's
# ON DELETE CASCADE runs (a generic plan over `$1 = col`; the index writer's deletes add a
# `source` to the same equality, and the planner may take either index for those).
OWNER_LOOKUPS = [
    ("file_id", "SELECT id FROM memory_chunks WHERE file_id = ANY(CAST($1 AS bigint[]))", "{1,2}"),
    (
        "file_id",
        "DELETE FROM memory_chunks WHERE file_id = ANY(CAST($1 AS bigint[])) "
        "AND id <> ALL(CAST('{5}' AS bigint[]))",
        "{1,2}",
    ),
    ("file_id", "DELETE FROM ONLY memory_chunks WHERE $1::bigint = file_id", "1"),
    ("session_id", "DELETE FROM ONLY memory_chunks WHERE $1::varchar = session_id", "s"),
    ("observation_id", "DELETE FROM ONLY memory_chunks WHERE $1::varchar = observation_id", "o"),
    (
        "memory_id",
        "DELETE FROM ONLY memory_chunks WHERE $1::uuid = memory_id",
        "00000000-0000-0000-0000-000000000001",
    ),
]


@pytest.mark.parametrize(("column", "statement", "value"), OWNER_LOOKUPS)
def test_lookups_by_owner_use_the_partial_owner_indexes(
    db: psycopg.Connection[Any], column: str, statement: str, value: str
) -> None:
    db.execute("SET enable_seqscan = off")
    db.execute("SET plan_cache_mode = force_generic_plan")
    try:
        db.execute(f"PREPARE lookup AS {statement}")
        plan = "\n".join(str(row[0]) for row in db.execute(f"EXPLAIN EXECUTE lookup('{value}')"))
    finally:
        db.execute("DEALLOCATE ALL")
        db.execute("RESET ALL")
    assert f"ix_memory_chunks_{column}" in plan, plan


def test_a_second_upgrade_waits_for_the_first_instead_of_failing(scratch_url: str) -> None:
    """Two processes starting on an un-migrated database: the first's migration is still open
    (its transaction not committed) when the second's begins."""
    engine = make_sync_engine(scratch_url)
    config = migrate.alembic_config(scratch_url)
    outcome: list[BaseException | None] = []
    try:
        with engine.connect() as first:
            config.attributes["connection"] = first
            with first.begin():
                command.upgrade(config, "head")
                second = threading.Thread(target=_upgrade_recording, args=(scratch_url, outcome))
                second.start()
                _wait_for_a_blocked_backend(scratch_url)
            second.join(timeout=60)
    finally:
        engine.dispose()
    assert outcome == [None]
    assert migrate.current_revision(scratch_url) == migrate.head_revision()


def _upgrade_recording(url: str, outcome: list[BaseException | None]) -> None:
    try:
        migrate.upgrade(url)
    except BaseException as error:  # what the second process's start would have died of
        outcome.append(error)
    else:
        outcome.append(None)


def _wait_for_a_blocked_backend(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        for _ in range(600):
            waiting = connection.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if waiting and waiting[0]:
                return
            time.sleep(0.05)
    raise AssertionError("the second upgrade never waited on the first")


# A deployment's rows as the first release wrote them, one or more in every table. Their chunks
# already hold the time of their text (0013 sets it on the others: a test of its own).
FIRST_RELEASE_ROWS = [
    "INSERT INTO sessions (id, project_path, status, user_prompt) VALUES "
    "('s1', '/p', 'summarized', 'fix the flaky test'), ('s2', '/p', 'active', NULL)",
    "INSERT INTO observations (id, session_id, project_path, function_name, observation_type, "
    "function_args, result, status) VALUES ('o1', 's1', '/p', 'read_file', 'read', "
    "'{\"path\": \"a.py\"}', '\"def f(): pass\"', 'compressed')",
    "INSERT INTO memory_files (project_path, path, source, hash, mtime, size) "
    "VALUES ('/p', '/p/MEMORY.md', 'memory', 'h1', 1.5, 10)",
    "INSERT INTO memories (scope, project_path, key, value) "
    "VALUES ('project', '/p', 'deploy.target', '{\"host\": \"prod\"}')",
    "INSERT INTO memory_versions (memory_id, version, value, written_at) "
    'SELECT id, 1, \'{"host": "staging"}\', now() FROM memories',
    "INSERT INTO memory_chunks "
    "(project_path, source, content, hash, search_terms, file_id, embedding, model, created_at) "
    "SELECT '/p', 'memory', 'Deploy with make release', 'c1', 'deploy make release', "
    "id, '[0.5, 0.25, 1]', 'local:test:3', to_timestamp(mtime) FROM memory_files",
    "INSERT INTO memory_chunks "
    "(project_path, source, content, hash, search_terms, observation_id, created_at) "
    "SELECT '/p', 'observation', 'read a.py', 'c2', 'read a.py', id, observed_at "
    "FROM observations",
    "INSERT INTO memory_embedding_cache (hash, model, embedding) "
    "VALUES ('c1', 'local:test:3', '[0.5, 0.25, 1]')",
    "INSERT INTO sync_runs (project_path, status) VALUES ('/p', 'done')",
    "INSERT INTO embedding_batches (project_path, model, hashes, provider_job) "
    "VALUES ('/p', 'gemini:m:768', '[\"c2\"]', 'batches/1')",
    "INSERT INTO llm_usage (day, project_path, model, requests) "
    "VALUES (current_date, '/p', 'g', 3)",
]


def every_row(url: str, columns: dict[str, list[str]]) -> dict[str, list[tuple[Any, ...]]]:
    """Each table's rows, in the columns given for it, sorted."""
    with psycopg.connect(libpq_url(url)) as connection:
        return {
            table: sorted(
                connection.execute(f"SELECT {', '.join(names)} FROM {table}").fetchall(), key=repr
            )
            for table, names in columns.items()
        }


def test_every_row_is_carried_through_each_step_down_and_up(scratch_url: str) -> None:
    migrate.upgrade(scratch_url, "0001")
    with psycopg.connect(libpq_url(scratch_url)) as connection:
        for statement in FIRST_RELEASE_ROWS:
            connection.execute(statement)
        listed = connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name <> 'alembic_version' "
            "ORDER BY ordinal_position"
        ).fetchall()
    columns: dict[str, list[str]] = {}
    for table, column in listed:
        columns.setdefault(table, []).append(column)
    written = every_row(scratch_url, columns)
    assert all(written.values()), [table for table, rows in written.items() if not rows]

    # Every step after the first release's, a migration added later included.
    script = ScriptDirectory.from_config(migrate.alembic_config(scratch_url))
    steps = [revision.revision for revision in reversed(list(script.walk_revisions()))]
    assert steps[0] == "0001"
    assert len(steps) >= 4
    for step in steps[1:]:
        migrate.upgrade(scratch_url, step)
        assert every_row(scratch_url, columns) == written, step
    migrate.downgrade(scratch_url, "0001")
    assert every_row(scratch_url, columns) == written
    migrate.upgrade(scratch_url)
    assert every_row(scratch_url, columns) == written


def test_0007_again_after_its_downgrade_keeps_settled_cancels_settled(scratch_url: str) -> None:
    # The downgrade's note leaves `last_error` starting `superseded: `: taken for a job never
    # cancelled, every settled one went back to `pending` (and a cancelled one was asked again).
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO embedding_batches (project_path, model, provider_job, hashes, status, "
            "last_error, cancel_status, cancel_requested_at, cancel_settled_at, cancel_error) "
            "VALUES "
            "('/p', 'g', 'batches/c', '[]', 'failed', 'superseded: x', 'cancelled', now(), "
            "now(), NULL), "
            "('/p', 'g', 'batches/e', '[]', 'failed', 'superseded: x', 'ended', now(), now(), "
            "'cancel refused: 404 NOT_FOUND'), "
            "('/p', 'g', 'batches/x', '[]', 'failed', 'superseded: x', 'expired', now(), "
            "now(), 'not cancelled: 48 hours past its creation'), "
            "('/p', 'g', 'batches/p', '[]', 'failed', 'superseded: x', 'pending', now(), NULL, "
            "'cancel unreachable: ConnectError')"
        )
    migrate.downgrade(scratch_url, "0006")
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT provider_job, cancel_status, cancel_settled_at IS NOT NULL, last_error "
            "FROM embedding_batches ORDER BY provider_job"
        ).fetchall()
    assert rows == [
        ("batches/c", "cancelled", True, "superseded: x; cancel cancelled"),
        ("batches/e", "ended", True, "superseded: x; cancel ended: cancel refused: 404 NOT_FOUND"),
        (
            "batches/p",
            "pending",
            False,
            "superseded: x",
        ),
        (
            "batches/x",
            "expired",
            True,
            "superseded: x; cancel expired: not cancelled: 48 hours past its creation",
        ),
    ]


def test_0009_moves_slashed_windows_keys_to_the_windows_key(scratch_url: str) -> None:
    # `/C:/...` keys (a body's or a query's spelling before canonical_project dropped the slash)
    # go to `C:\\...`; where both spellings hold one memory, the older keeps its value under a
    # name of its own; where they hold one file or day of usage, one row stays.
    migrate.upgrade(scratch_url, "0008")
    slashed, windows = "/C:/Users/dev/shop", "C:\\Users\\dev\\shop"
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO sessions (id, project_path) VALUES ('a', %s), ('b', %s), ('c', '/p')",
            (slashed, "//c:/Users/dev/shop"),
        )
        connection.execute(
            "INSERT INTO memories (scope, project_path, key, value, updated_at) VALUES "
            "('project', %s, 'name', '\"old\"', now() - interval '1 day'), "
            "('project', %s, 'name', '\"new\"', now()), "
            "('project', %s, 'port', '8080', now())",
            (windows, slashed, slashed),
        )
        connection.execute(
            "INSERT INTO memory_files (project_path, path, source, hash, mtime, size, indexed_at) "
            "VALUES (%s, '/f.md', 'memory', 'h1', 0, 0, now()), "
            "(%s, '/f.md', 'memory', 'h2', 0, 0, now() - interval '1 day')",
            (slashed, windows),
        )
        connection.execute(
            "INSERT INTO llm_usage (day, project_path, model, requests, input_tokens, "
            "output_tokens) VALUES ('2026-11-27', %s, 'm', 1, 10, 100), "
            "('2026-11-27', %s, 'm', 2, 20, 200)",
            (slashed, windows),
        )
        # A queued run is read from its folder (the key when NULL): keyed `C:\...`, the worker
        # read a folder of that name, which a POSIX server has not.
        connection.execute(
            "INSERT INTO sync_runs (id, project_path) VALUES (gen_random_uuid(), %s)", (slashed,)
        )
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        runs = connection.execute("SELECT project_path, folder FROM sync_runs").fetchall()
        assert runs == [(windows, slashed)]
        sessions = connection.execute("SELECT id, project_path FROM sessions ORDER BY id")
        assert sessions.fetchall() == [("a", windows), ("b", windows), ("c", "/p")]
        memories = connection.execute(
            "SELECT project_path, key, value FROM memories ORDER BY key"
        ).fetchall()
        assert memories == [
            (windows, "name", "new"),
            (windows, "name (duplicate spelling)", "old"),
            (windows, "port", 8080),
        ]
        files = connection.execute("SELECT project_path, hash FROM memory_files").fetchall()
        assert files == [(windows, "h1")]
        usage = connection.execute(
            "SELECT project_path, requests, input_tokens, output_tokens FROM llm_usage"
        ).fetchall()
        assert usage == [(windows, 3, 30, 300)]


def test_0011_moves_bare_drive_keys_to_the_drives_root(scratch_url: str) -> None:
    # `/C:` and `C:` keys (kept so before canonical_project read a drive alone as its root) go to
    # `C:\\`, merged as 0009 merges: the older of one memory keeps its value under its own name.
    migrate.upgrade(scratch_url, "0010")
    root = "C:\\"
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO sessions (id, project_path) VALUES ('a', '/C:'), ('b', 'c:'), "
            "('c', '/C:x'), ('d', '/home/C:')"
        )
        connection.execute(
            "INSERT INTO memories (scope, project_path, key, value, updated_at) VALUES "
            "('project', %s, 'name', '\"old\"', now() - interval '1 day'), "
            "('project', '//c:', 'name', '\"new\"', now())",
            (root,),
        )
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        sessions = connection.execute("SELECT id, project_path FROM sessions ORDER BY id")
        assert sessions.fetchall() == [("a", root), ("b", root), ("c", "/C:x"), ("d", "/home/C:")]
        memories = connection.execute(
            "SELECT project_path, key, value FROM memories ORDER BY key"
        ).fetchall()
        assert memories == [(root, "name", "new"), (root, "name (duplicate spelling)", "old")]


def test_0012_makes_the_terms_of_marked_text_again(scratch_url: str) -> None:
    # Stored by the old split: `getCafé` (decomposed) as `get Cafe`, a Devanagari word as its
    # bare letters. A memory's row gets today's terms; a file's is read again by the next sync
    # (its terms hold section titles only the file has); ASCII rows are left as they are.
    migrate.upgrade(scratch_url, "0011")
    camel = unicodedata.normalize("NFD", "call getCafé() now")
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        ids = [
            connection.execute(
                "INSERT INTO memories (scope, project_path, key, value) "
                "VALUES ('project', '/p', %s, '1') RETURNING id",
                (key,),
            ).fetchone()[0]  # type: ignore[index]
            for key in ("a", "b")
        ]
        connection.execute(
            "INSERT INTO memory_files (project_path, path, source, hash, mtime, size, rules) "
            "VALUES ('/p', '/p/a.md', 'memory', 'h', 0, 0, 'r1'), "
            "('/p', '/p/b.md', 'memory', 'h', 0, 0, 'r1'), "
            "('/p', '/p/c.md', 'memory', 'h', 0, 0, 'r1')"
        )
        files = dict(connection.execute("SELECT path, id FROM memory_files").fetchall())
        connection.execute(
            "INSERT INTO memory_chunks (project_path, source, memory_id, file_id, content, hash, "
            "search_terms) VALUES ('/p', 'kv', %s, NULL, %s, 'h', 'get Cafe'), "
            "('/p', 'kv', %s, NULL, 'getCafe stays', 'h', 'stale'), "
            "('/p', 'memory', NULL, %s, 'टोकन की जाँच', 'h', 'ट कन ज च'), "
            "('/p', 'memory', NULL, %s, 'Straße getWeg', 'h', 'get Weg'), "
            # ASCII code under a Hindi heading: the title's letters split off in the terms alone.
            "('/p', 'memory', NULL, %s, 'def run_check(x):', 'h', "
            "'run check x टोकन की जाँच ट कन ज च')",
            (ids[0], camel, ids[1], files["/p/a.md"], files["/p/b.md"], files["/p/c.md"]),
        )
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        terms = connection.execute(
            "SELECT content, search_terms FROM memory_chunks WHERE source = 'kv' ORDER BY id"
        ).fetchall()
        assert terms == [
            (camel, unicodedata.normalize("NFD", "get Café")),
            ("getCafe stays", "stale"),
        ]
        rules = connection.execute("SELECT path, rules FROM memory_files ORDER BY path")
        assert rules.fetchall() == [("/p/a.md", None), ("/p/b.md", "r1"), ("/p/c.md", None)]
        found = connection.execute(
            "SELECT count(*) FROM memory_chunks WHERE tsv @@ to_tsquery('english', %s)",
            (unicodedata.normalize("NFD", "café"),),
        )
        assert found.fetchone() == (1,)


def test_an_upgrade_is_refused_while_another_agmem_is_connected(scratch_url: str) -> None:
    # An older agmem left running through `agmem migrate` went on writing keys in the form 0009
    # and 0010 had just converted, which the new build could neither read nor delete.
    migrate.upgrade(scratch_url, "0008")
    with psycopg.connect(libpq_url(scratch_url), application_name="agmem") as older:
        with pytest.raises(migrate.OthersConnected, match=r"agmem x1\): stop every agmem"):
            migrate.upgrade(scratch_url)
        assert migrate.current_revision(scratch_url) == "0008"
        older.execute("SELECT 1")  # still open through the refusal
    # Another process's check of the revision, or its migration, does not count.
    with psycopg.connect(libpq_url(scratch_url), application_name="agmem-admin"):
        migrate.upgrade(scratch_url)
    assert migrate.current_revision(scratch_url) == migrate.head_revision()
    # At head there is nothing to apply: a running agmem is no concern.
    with psycopg.connect(libpq_url(scratch_url), application_name="agmem-sync"):
        migrate.upgrade(scratch_url)


def test_relative_targets_and_downgrades_are_refused_while_another_agmem_is_connected(
    scratch_url: str,
) -> None:
    # `agmem migrate +1` skipped the check (`+1` is no revision's id), and a downgrade had none:
    # an older agmem left running wrote on through either.
    migrate.upgrade(scratch_url, "0008")
    with psycopg.connect(libpq_url(scratch_url), application_name="agmem"):
        with pytest.raises(migrate.OthersConnected):
            migrate.upgrade(scratch_url, "+1")
        with pytest.raises(migrate.OthersConnected):
            migrate.downgrade(scratch_url, "-1")
        with pytest.raises(migrate.OthersConnected):
            migrate.downgrade(scratch_url, "0007")
        assert migrate.current_revision(scratch_url) == "0008"
    migrate.upgrade(scratch_url, "+1")
    migrate.downgrade(scratch_url, "-1")
    assert migrate.current_revision(scratch_url) == "0008"
    # Alembic's own refusal (no step above head) still says what is wrong.
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), application_name="agmem"):
        with pytest.raises(migrate.MigrationFailed) as refused:
            migrate.upgrade(scratch_url, "+1")
    assert not isinstance(refused.value, migrate.OthersConnected)


def test_a_start_that_read_the_old_revision_does_not_refuse_after_another_migrated(
    scratch_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two `agmem mcp` starting at once: B read 0008, then A migrated and connected as `agmem`
    # before B's check of the others, which found A and refused though nothing was left to do.
    migrate.upgrade(scratch_url)
    real_read = migrate.current_revision
    reads: list[str | None] = []

    def read_before_the_other_migrated(url: str) -> str | None:
        reads.append(real_read(url))
        return "0008" if len(reads) == 1 else reads[-1]

    monkeypatch.setattr(migrate, "current_revision", read_before_the_other_migrated)
    with psycopg.connect(libpq_url(scratch_url), application_name="agmem"):
        migrate.upgrade(scratch_url)
    assert len(reads) == 2
    assert real_read(scratch_url) == migrate.head_revision()


def test_rows_an_older_agmem_wrote_after_the_upgrade_are_converted_by_going_down_and_up(
    scratch_url: str,
) -> None:
    # The recovery docs/configuration.md gives for a rolling upgrade that went wrong: 0009-0013
    # have no-op downgrades, so down to 0008 and up again converts what an older agmem wrote in
    # the old form after the first upgrade (rows the new build could neither read nor delete).
    migrate.upgrade(scratch_url)
    nfc, nfd = "project.caf\u00e9", "project.cafe\u0301"
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO memories (scope, project_path, key, value) VALUES "
            "('project', '/a', %s, '\"late\"'), ('project', '/C:/Users/dev/shop', 'k', '1')",
            (nfd,),
        )
    migrate.downgrade(scratch_url, "0008")
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        rows = connection.execute("SELECT project_path, key FROM memories").fetchall()
    assert sorted(rows) == [("/a", nfc), ("C:\\Users\\dev\\shop", "k")]


def test_0013_gives_stored_rows_the_time_of_their_text(scratch_url: str) -> None:
    # Rows stamped when they were indexed (today) get the time of what they hold; a transcript's
    # file is read again by the next sync, which alone knows its messages' times.
    migrate.upgrade(scratch_url, "0012")
    indexed = "2026-11-20T00:00:00Z"
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO sessions (id, project_path, status, ended_at, last_activity_at) VALUES "
            "('ended', '/p', 'summarized', '2026-01-02T00:00:00Z', '2026-01-01T00:00:00Z'), "
            "('open', '/p', 'summarized', NULL, '2026-02-01T00:00:00Z')"
        )
        connection.execute(
            "INSERT INTO observations (id, session_id, project_path, function_name, "
            "function_args, result, observation_type, status, observed_at) VALUES "
            "('o1', 'ended', '/p', 'read_file', '{}', '\"x\"', 'file_read', 'compressed', "
            "'2026-03-01T00:00:00Z')"
        )
        (memory,) = connection.execute(
            "INSERT INTO memories (scope, project_path, key, value, updated_at) "
            "VALUES ('project', '/p', 'k', '1', '2026-04-01T00:00:00Z') RETURNING id"
        ).fetchone()  # type: ignore[misc]
        connection.execute(
            "INSERT INTO memory_files (project_path, path, source, hash, mtime, size, rules) "
            "VALUES ('/p', '/p/a.md', 'memory', 'h', %s, 0, 'r1'), "
            "('/p', '/p/s.jsonl', 'sessions', 'h', %s, 0, 'r1')",
            (
                datetime(2026, 5, 1, tzinfo=UTC).timestamp(),
                datetime(2026, 6, 1, tzinfo=UTC).timestamp(),
            ),
        )
        files = dict(connection.execute("SELECT path, id FROM memory_files").fetchall())
        connection.execute(
            "INSERT INTO memory_chunks (project_path, source, observation_id, session_id, "
            "memory_id, file_id, content, hash, created_at) VALUES "
            "('/p', 'observation', 'o1', 'ended', NULL, NULL, 'obs', 'h', %(at)s), "
            "('/p', 'summary', NULL, 'ended', NULL, NULL, 'ended summary', 'h', %(at)s), "
            "('/p', 'summary', NULL, 'open', NULL, NULL, 'open summary', 'h', %(at)s), "
            "('/p', 'kv', NULL, NULL, %(memory)s, NULL, 'k: 1', 'h', %(at)s), "
            "('/p', 'memory', NULL, NULL, NULL, %(md)s, 'note', 'h', %(at)s), "
            "('/p', 'sessions', NULL, NULL, NULL, %(jsonl)s, 'User: hi', 'h', %(at)s)",
            {"at": indexed, "memory": memory, "md": files["/p/a.md"], "jsonl": files["/p/s.jsonl"]},
        )
    migrate.upgrade(scratch_url)
    with psycopg.connect(libpq_url(scratch_url), autocommit=True) as connection:
        times = dict(connection.execute("SELECT content, created_at FROM memory_chunks").fetchall())
        assert {content: at.date().isoformat() for content, at in times.items()} == {
            "obs": "2026-03-01",
            "ended summary": "2026-01-02",
            "open summary": "2026-02-01",
            "k: 1": "2026-04-01",
            "note": "2026-05-01",
            "User: hi": "2026-11-20",  # until the next sync reads the file again
        }
        rules = connection.execute("SELECT path, rules FROM memory_files ORDER BY path")
        assert rules.fetchall() == [("/p/a.md", "r1"), ("/p/s.jsonl", None)]
