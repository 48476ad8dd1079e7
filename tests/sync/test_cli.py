from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg
from typer.testing import CliRunner

from app.cli import cli
from tests.cli.helpers import AGMEM, agmem_env
from tests.sync.helpers import make_project


def test_sync_command_prints_the_summary_line(
    env: dict[str, str], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    (project / "node_modules").mkdir()
    runner = CliRunner()

    first = runner.invoke(cli, ["sync", "--project", str(project)], env=env)

    assert first.exit_code == 0, first.output
    assert "scanned 6 · changed 6 · deleted 0 · chunks" in first.stdout
    assert "skipped 0" in first.stdout
    second = runner.invoke(cli, ["sync", "--project", str(project)], env=env)
    assert second.exit_code == 0, second.output
    assert "scanned 6 · changed 0 · deleted 0 · chunks 0 · embedded 0 · cached 0" in second.stdout


def test_sync_command_fails_in_one_line(env: dict[str, str], tmp_path: Path) -> None:
    runner = CliRunner()
    # `-p`, as every other command with --project spells it (sync alone had no short form).
    missing = runner.invoke(cli, ["sync", "-p", str(tmp_path / "nope")], env=env)
    assert missing.exit_code == 1
    # Exactly one line: no blank line from the (undrawn) progress bar before it.
    assert missing.stderr == f"agmem: error: project folder {tmp_path / 'nope'} does not exist\n"
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    for args, message in (
        (["--project", str(a_file)], f"project folder {a_file} is not a folder"),
        (
            ["--project", str(tmp_path), "--sessions-dir", "chats"],
            # Nothing was indexed from it: no hint to forget it (a typo's hint sent users to drop
            # nothing).
            f"sessions folder {tmp_path / 'chats'} does not exist",
        ),
    ):
        refused = runner.invoke(cli, ["sync", *args], env=env)
        assert refused.exit_code == 1
        assert refused.stderr.strip().splitlines() == [f"agmem: error: {message}"]
    bad = runner.invoke(
        cli, ["sync", "--project", str(tmp_path)], env={**env, "AGMEM_SYNC_CHUNK_TOKENS": "1"}
    )
    assert bad.exit_code == 2
    assert "AGMEM_SYNC_CHUNK_TOKENS" in bad.stderr


def test_a_memory_root_without_memory_files_is_refused_and_nothing_dropped(
    env: dict[str, str], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # `--memory-dir memory` (the notes folder, not the root above it) found no memory file, said
    # nothing, and deleted the chunks of those indexed before from the right root.
    project = make_project(tmp_path / "proj")
    runner = CliRunner()
    assert runner.invoke(cli, ["sync", "-p", str(project)], env=env).exit_code == 0
    before = db.execute("SELECT count(*) FROM memory_chunks WHERE source = 'memory'").fetchone()
    assert before is not None
    assert before[0] > 0

    for args in (["--memory-dir", "memory"], ["--memory-dir", "memory", "--watch"]):
        wrong = runner.invoke(cli, ["sync", "-p", str(project), *args], env=env)

        assert wrong.exit_code == 1
        assert wrong.stderr.strip().splitlines()[-1:] == [
            # Its files are the default root's: forgetting `memory` drops none, and is not hinted.
            f"agmem: error: memory folder {project / 'memory'} holds no memory file (MEMORY.md, "
            "memory.md or memory/): name the folder that holds them"
        ]
    after = db.execute("SELECT count(*) FROM memory_chunks WHERE source = 'memory'").fetchone()
    assert after == before


def test_the_default_memory_root_named_may_hold_no_memory_file(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A project of transcripts alone syncs without --memory-dir; naming the same root (`.` or
    # the project's own path, as a script passing the flag always does) must not refuse it.
    project = tmp_path / "transcripts-only"
    project.mkdir()
    runner = CliRunner()
    for root in (".", str(project)):
        named = runner.invoke(cli, ["sync", "-p", str(project), "--memory-dir", root], env=env)

        assert named.exit_code == 0, named.output


def test_force_and_reembed_flags_reach_the_sync(
    env: dict[str, str], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = make_project(tmp_path / "proj")
    runner = CliRunner()
    assert runner.invoke(cli, ["sync", "--project", str(project)], env=env).exit_code == 0
    db.execute("UPDATE memory_chunks SET model = 'old:model:256'")

    forced = runner.invoke(cli, ["sync", "--project", str(project), "--force"], env=env)
    assert forced.exit_code == 0, forced.output
    assert "changed 6 ·" in forced.stdout
    assert "embedded 0 ·" in forced.stdout  # everything came from the cache

    db.execute("UPDATE memory_chunks SET model = 'old:model:256'")
    migrated = runner.invoke(cli, ["sync", "--project", str(project), "--reembed"], env=env)
    assert migrated.exit_code == 0, migrated.output
    assert "changed 0 ·" in migrated.stdout
    left = db.execute("SELECT count(*) FROM memory_chunks WHERE model = 'old:model:256'")
    assert left.fetchone() == (0,)


def test_skipped_paths_print_as_they_are(
    env: dict[str, str], db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Rich markup read "[beta]" in a path as a style (dropped) and "[/b]" as a closing tag:
    # a MarkupError traceback after the sync had run.
    project = tmp_path / "proj"
    (project / "memory" / "x[").mkdir(parents=True)
    (project / "memory" / "x[" / "b].md").write_bytes(b"a\x00b")
    (project / "memory" / "[beta].md").write_bytes(b"a\x00b")

    result = CliRunner().invoke(cli, ["sync", "--project", str(project)], env=env)

    assert result.exit_code == 0, result.output
    assert f"skipped {project}/memory/x[/b].md: " in result.stderr
    assert f"skipped {project}/memory/[beta].md: " in result.stderr
    assert "skipped 2" in result.stdout


def test_watch_stops_cleanly_on_sigterm(env: dict[str, str], tmp_path: Path) -> None:
    # SIGTERM (kill, systemd, docker stop) killed the watch without its exit handlers: the
    # embedded PostgreSQL it had started kept running after it.
    project = make_project(tmp_path / "proj")
    watch = subprocess.Popen(
        [AGMEM, "sync", "--project", str(project), "--watch"],
        env=agmem_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert watch.stdout is not None
        for line in watch.stdout:
            if line.startswith("scanned "):  # the first sync is done, the watchers are up
                break
    finally:
        watch.send_signal(signal.SIGTERM)
        output, _ = watch.communicate(timeout=30)

    assert watch.returncode == 0, output
    assert "Traceback" not in output
