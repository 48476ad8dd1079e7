"""`agmem worker`, `agmem worker retry-failed` and the worker lines of `agmem status`."""

from __future__ import annotations

import signal
import subprocess
import time
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from app.cli import cli
from tests.cli.helpers import AGMEM, agmem_env, invoke_agmem, run_agmem
from tests.conftest import make_settings
from tests.worker.builders import drain, make_observation, make_session, row


def test_retry_failed_requeues_and_status_reports(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "f1", status="failed")
    make_observation(db, "f2", status="failed")
    make_observation(db, "done", status="compressed")
    db.execute("UPDATE observations SET tokens_saved = 25 WHERE id = 'done'")

    status = invoke_agmem("status", DATABASE_URL=database_url)
    assert status.returncode == 0, status.stderr
    assert "failed 2, compressed 1" in status.stdout
    assert "saved 25 in total" in status.stdout
    assert "25 in /home/dev/shop" in status.stdout

    retried = run_agmem("worker", "retry-failed", DATABASE_URL=database_url)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == "requeued 2 observations and 0 sessions"
    assert row(db, "SELECT count(*) AS n FROM observations WHERE status = 'captured'")["n"] == 2


def test_status_prints_project_paths_as_they_are(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # Rich read "[beta]" in a path as a style (dropped it) and "[/]" as a closing tag (a
    # MarkupError traceback), and wrapped long lines at 80 columns mid-phrase.
    project = "/home/dev/[beta]/a-rather-long-project-folder-name-that-runs-past-eighty/shop[/]"
    make_session(db, project_path=project)
    make_observation(db, "done", project_path=project, status="compressed")
    db.execute("UPDATE observations SET tokens_saved = 25 WHERE id = 'done'")

    result = CliRunner().invoke(
        cli, ["status"], env={"DATABASE_URL": database_url, "AGMEM_LOG_LEVEL": "error"}
    )

    assert result.exit_code == 0, result.output
    assert f"           25 in {project}\n" in result.stdout
    assert "oldest pending -\n" in result.stdout


def test_retry_failed_makes_a_relative_project_absolute(
    db: psycopg.Connection[Any], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_session(db)  # in /home/dev/shop
    make_observation(db, "f1", status="failed")
    monkeypatch.chdir("/")
    env = {"DATABASE_URL": database_url, "AGMEM_LOG_LEVEL": "error"}
    retried = CliRunner().invoke(
        cli, ["worker", "retry-failed", "--project", "home/dev/shop"], env=env
    )
    assert retried.exit_code == 0, retried.output
    assert retried.output.strip() == "requeued 1 observations and 0 sessions"


def test_worker_rejects_a_bad_concurrency_in_one_line(database_url: str) -> None:
    result = run_agmem("worker", "--concurrency", "0", DATABASE_URL=database_url)
    assert result.returncode != 0
    assert "concurrency" in result.stderr.lower()


def test_worker_on_an_unreachable_database_is_one_line() -> None:
    # It started, printed its banner, then logged a traceback every few seconds per lane.
    env = {"DATABASE_URL": "postgresql://agmem:pw@127.0.0.1:1/agmem", "AGMEM_LOG_LEVEL": "info"}
    result = CliRunner().invoke(cli, ["worker"], env=env)

    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("agmem: error: database unreachable:")


@pytest.mark.slow
def test_worker_works_then_stops_cleanly_on_sigterm(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db)
    make_observation(db, "o1")
    process = subprocess.Popen(
        [AGMEM, "worker", "-c", "2"],
        env=agmem_env(DATABASE_URL=database_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while row(db, "SELECT status FROM observations")["status"] != "compressed":
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert "worker.stopped" in output


def test_serve_offers_no_worker() -> None:
    result = invoke_agmem("serve", "--help")
    assert result.returncode == 0
    assert "--no-worker" in result.stdout


def test_retry_failed_summarises_the_observations_sessions_again(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, status="ending")
    make_observation(db, "f1", status="failed")
    drain(make_settings(), database_url)
    before = row(db, "SELECT status, summary FROM sessions WHERE id = 's1'")
    assert before["status"] == "summarized"
    assert "1 observation could not be compressed" in before["summary"]

    retried = invoke_agmem("worker", "retry-failed", DATABASE_URL=database_url)
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.strip() == (
        "requeued 1 observations and 0 sessions; "
        "1 summarised sessions will be summarised again with them"
    )
    drain(make_settings(), database_url)

    after = row(db, "SELECT status, summary, total_observations FROM sessions WHERE id = 's1'")
    assert row(db, "SELECT status FROM observations WHERE id = 'f1'")["status"] == "compressed"
    assert after["status"] == "summarized"
    assert "could not be compressed" not in after["summary"]
    summaries = row(db, "SELECT count(*) AS n FROM memory_chunks WHERE source = 'summary'")
    assert summaries["n"] == 1


def test_status_says_how_observations_were_compressed_and_what_gemini_spent(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # The queue's counts said nothing of Gemini: whether it wrote anything, whether the
    # fallback had taken over, how much of today's budget was spent.
    make_session(db)
    for n, method in enumerate(["gemini:gemini-2.5-flash", "extractive", "extractive", "raw"]):
        make_observation(db, f"o{n}", status="compressed")
        db.execute(
            "UPDATE observations SET generated_by = %s, tokens_saved = 5 WHERE id = %s",
            (method, f"o{n}"),
        )
    db.execute("UPDATE observations SET last_error = 'gemini 503: busy' WHERE id = 'o2'")
    db.execute(
        "INSERT INTO llm_usage (day, project_path, model, requests, input_tokens, output_tokens) "
        "VALUES ((now() AT TIME ZONE 'UTC')::date, '/p', 'gemini-2.5-flash', 7, 1200, 34), "
        "((now() AT TIME ZONE 'UTC')::date - 1, '/p', 'gemini-2.5-flash', 99, 99999, 9)"
    )
    env = {"DATABASE_URL": database_url, "AGMEM_LOG_LEVEL": "error"}

    offline = CliRunner().invoke(cli, ["status"], env=env)
    online = CliRunner().invoke(
        cli,
        ["status"],
        env=env | {"GEMINI_API_KEY": "k", "AGMEM_GEMINI_BASE_URL": "http://gateway:8080"},
    )

    assert offline.exit_code == online.exit_code == 0, offline.output + online.output
    compressed = (
        "compressed extractive 2 (1 after Gemini failed), gemini:gemini-2.5-flash 1, raw 1\n"
    )
    assert compressed in offline.stdout
    assert "gemini     off (no GEMINI_API_KEY): the extractive fallback compresses\n" in (
        offline.stdout
    )
    assert (
        "gemini     gemini-2.5-flash at http://gateway:8080: 1,234 of 2,000,000 tokens "
        "today in 7 calls\n"
    ) in online.stdout


def test_status_names_the_last_error_that_sent_rows_to_the_fallback(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # A wrong key: `extractive 2 (2 after Gemini failed)` said that Gemini failed, not why.
    make_session(db)
    for n, (error, at) in enumerate(
        [
            ("gemini 503: busy", "2026-11-25 09:00+00"),
            ("gemini 400: API key not valid.\n(extractive fallback ...)", "2026-11-25 10:30+00"),
        ]
    ):
        make_observation(db, f"o{n}", status="compressed")
        db.execute(
            "UPDATE observations SET generated_by = 'extractive', tokens_saved = 5, "
            "last_error = %s, compressed_at = %s WHERE id = %s",
            (error, at, f"o{n}"),
        )

    result = CliRunner().invoke(
        cli, ["status"], env={"DATABASE_URL": database_url, "AGMEM_LOG_LEVEL": "error"}
    )

    assert result.exit_code == 0, result.output
    assert (
        "compressed extractive 2 (2 after Gemini failed)\n"
        "           last failure 2026-11-25 10:30 UTC: gemini 400: API key not valid.\n"
    ) in result.stdout
