"""`agmem redact`: secrets stored before a rule caught them are redacted in place."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app.db.engine import make_async_engine, make_sessionmaker
from app.index.terms import index_terms
from app.redaction import REDACTION_WRITER, RedactReport, redact_stored
from tests.cli.helpers import invoke_agmem
from tests.memories.helpers import PROJECT, put, url
from tests.worker.builders import make_observation, make_session

# Each line's secret is one that no rule caught before privacy16.
LEAKS = (
    "mysql -u root -phunter2 shop\n"
    "password: hunter2\n"
    "//registry.npmjs.org/:_authToken=npm_hunter2hunter2\n"
)
REDACTED_LEAKS = (
    "mysql -u root -p[REDACTED] shop\npassword: [REDACTED]\n"
    "//registry.npmjs.org/:_authToken=[REDACTED]\n"
)
TABLES = ("sessions", "observations", "memories", "memory_versions", "memory_chunks")
VECTOR = "[" + ",".join(["0.0625"] * 256) + "]"


def _run(url: str, **options: Any) -> RedactReport:
    async def go() -> RedactReport:
        engine = make_async_engine(url, pool_size=1)
        try:
            return await redact_stored(make_sessionmaker(engine), batch_rows=2, **options)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def _leaking(db: psycopg.Connection[Any]) -> dict[str, int]:
    counts = {}
    for table in TABLES:
        query = f"SELECT count(*) FROM {table} t WHERE t::text LIKE '%%hunter2%%'"
        counts[table] = (db.execute(query).fetchone() or (0,))[0]
    return counts


def _store_old_secrets(db: psycopg.Connection[Any]) -> None:
    """Rows as an agmem without today's rules stored them (straight into the tables)."""
    make_session(db, user_prompt=LEAKS)
    db.execute("UPDATE sessions SET summary = %s, created_by = %s", (LEAKS, "password: hunter2"))
    db.execute("UPDATE sessions SET metadata = %s", (json.dumps({"auth": "aHVudGVyMjpodW50ZXIy"}),))
    make_observation(db, "o1", args={"command": LEAKS, "auth": "bWU6aHVudGVyMg=="}, result=[LEAKS])
    make_observation(db, "o2", args={"path": "src/clean.ts"}, result="clean")
    db.execute("UPDATE observations SET compressed_data = %s WHERE id = 'o1'", (LEAKS,))
    memory = db.execute(
        "INSERT INTO memories (scope, project_path, key, value, tags, created_by) "
        "VALUES ('project', '/p', 'deploy', %s, %s, %s) RETURNING id",
        (json.dumps({"steps": LEAKS}), ["deploy", "token: hunter2x", "token: hunter2y"], "me"),
    ).fetchone()
    assert memory is not None
    db.execute(
        "INSERT INTO memory_versions (memory_id, project_path, version, value, written_by, "
        "written_at) VALUES (%s, '/p', 1, %s, 'me', now())",
        (memory[0], json.dumps(LEAKS)),
    )
    content = "## Deploy\n\n" + LEAKS
    for text, terms in ((content, index_terms(content, "Ops Deploy")), ("clean text", "")):
        db.execute(
            "INSERT INTO memory_chunks (project_path, source, file_path, start_line, end_line, "
            "content, hash, search_terms, embedding, model) "
            "VALUES ('/p', 'memory', 'MEMORY.md', 1, 5, %s, %s, %s, %s, 'local:x:256')",
            (text, hashlib.sha256(text.encode()).hexdigest(), terms, VECTOR),
        )


def test_redact_rewrites_every_stored_secret_and_nothing_else(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store_old_secrets(db)
    assert all(_leaking(db).values())

    dry = _run(database_url, dry_run=True)
    assert dry.changed == {
        "sessions": 1,
        "observations": 1,
        "memories": 1,
        "memory_versions": 1,
        "memory_chunks": 1,
    }
    assert all(_leaking(db).values())  # a dry run writes nothing

    report = _run(database_url)
    assert report.changed == dry.changed
    assert report.scanned["observations"] == 2
    assert report.scanned["memory_chunks"] == 2
    assert _leaking(db) == dict.fromkeys(TABLES, 0)

    prompt, by, metadata = db.execute(
        "SELECT user_prompt, created_by, metadata FROM sessions"
    ).fetchone() or (None, None, None)
    assert prompt == (
        "mysql -u root -p[REDACTED] shop\npassword: [REDACTED]\n"
        "//registry.npmjs.org/:_authToken=[REDACTED]\n"
    )
    assert (by, metadata) == ("password: [REDACTED]", {"auth": "[REDACTED]"})
    args, result = db.execute(
        "SELECT function_args, result FROM observations WHERE id = 'o1'"
    ).fetchone() or (None, None)
    assert args == {"command": prompt, "auth": "[REDACTED]"}
    assert result == [prompt]
    (tags,) = db.execute("SELECT tags FROM memories").fetchone() or (None,)
    assert tags == ["deploy", "token: [REDACTED]"]  # two tags made equal are kept once

    chunk = db.execute(
        "SELECT content, hash, search_terms, embedding IS NULL, model, tsv::text "
        "FROM memory_chunks WHERE file_path = 'MEMORY.md' AND content <> 'clean text'"
    ).fetchone()
    assert chunk is not None
    content, digest, terms, unembedded, model, tsv = chunk
    assert content == "## Deploy\n\n" + prompt  # the same lines: start and end lines hold
    assert digest == hashlib.sha256(content.encode()).hexdigest()
    assert terms == index_terms(content, "Ops Deploy")
    assert (unembedded, model) == (True, None)  # the worker embeds the redacted text
    assert "hunter2" not in tsv
    # The clean rows keep their vectors.
    assert db.execute(
        "SELECT embedding IS NOT NULL FROM memory_chunks WHERE content = 'clean text'"
    ).fetchone() == (True,)

    # Idempotent: a second pass changes nothing.
    assert sum(_run(database_url).changed.values()) == 0


def test_agmem_redact_reports_counts_in_one_line(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store_old_secrets(db)
    dry = invoke_agmem("redact", "--dry-run", DATABASE_URL=database_url)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(
        "would redact 5 rows (to change/read: sessions 1/1, observations 1/2"
    )
    assert dry.stdout.rstrip().endswith("; nothing written")
    assert all(_leaking(db).values())

    done = invoke_agmem("redact", DATABASE_URL=database_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("redacted 5 rows")
    assert _leaking(db) == dict.fromkeys(TABLES, 0)


def test_a_redacted_memory_is_a_new_version_written_by_the_redaction(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    # redact17: the rewritten memory kept its version, so a client holding the ETag of the
    # secret-bearing value could still write over it as if nothing had changed.
    put(client, "deploy", "ship it", createdBy="claude", ttl=3600)
    put(client, "deploy", "ship it twice", createdBy="gemini")
    db.execute("UPDATE memories SET value = %s", (json.dumps({"steps": LEAKS}),))
    before = db.execute("SELECT updated_at, expires_at FROM memories").fetchone()
    assert before is not None

    assert _run(database_url).changed["memories"] == 1

    got = client.get(url("deploy"), params={"projectPath": PROJECT, "history": "true"})
    assert got.status_code == 200
    memory = got.json()
    assert got.headers["ETag"] == '"3"'
    assert (memory["version"], memory["updatedBy"], memory["createdBy"]) == (
        3,
        REDACTION_WRITER,
        "claude",
    )
    assert memory["value"] == {"steps": REDACTED_LEAKS}
    history = [(v["version"], v["value"], v["writtenBy"]) for v in memory["history"]]
    # The version it replaced is kept, as every write keeps it, but redacted too.
    assert history == [
        (2, {"steps": REDACTED_LEAKS}, "gemini"),
        (1, "ship it", "claude"),
    ]
    updated_at, expires_at = db.execute(
        "SELECT updated_at, expires_at FROM memories"
    ).fetchone() or (None, None)
    assert updated_at > before[0]
    assert expires_at == before[1]  # the owner's TTL is not restarted by the redaction
    assert _leaking(db)["memory_versions"] == 0

    stale = client.put(
        url("deploy"), json={"value": "x", "projectPath": PROJECT}, headers={"If-Match": '"2"'}
    )
    assert stale.status_code == 409
    assert stale.json()["error"] == "VersionConflict"
    # A second pass finds nothing and makes no version.
    assert sum(_run(database_url).changed.values()) == 0
    assert db.execute("SELECT version FROM memories").fetchone() == (3,)


def test_a_memory_whose_tags_only_are_redacted_is_a_new_version_too(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    put(client, "plan", "v1", tags=["ops"])
    db.execute("UPDATE memories SET tags = %s", (["ops", "token: hunter2x"],))
    _run(database_url)
    memory = client.get(url("plan"), params={"projectPath": PROJECT}).json()
    assert (memory["version"], memory["tags"]) == (2, ["ops", "token: [REDACTED]"])
