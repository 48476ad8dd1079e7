"""`agmem memory get|set|list|rm` and `agmem resume` on the test database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from app.cli import cli

PROJECT = "/home/dev/shop"


@pytest.fixture
def agmem(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Any:
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("AGMEM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(cli, list(args))

    return run


def test_set_get_list_rm(agmem: Any) -> None:
    created = agmem("memory", "set", "project.port", "3000", "-p", PROJECT)
    assert created.exit_code == 0, created.output
    assert created.stdout.strip() == f"created project.port (project in {PROJECT}), version 1"
    agmem("memory", "set", "current.task", "auth refactoring", "-p", PROJECT, "--tag", "auth")
    as_text = agmem("memory", "set", "project.zip", "02134", "-p", PROJECT, "--string")
    assert as_text.exit_code == 0, as_text.output

    port = agmem("memory", "get", "project.port", "-p", PROJECT)
    assert port.stdout.strip() == "3000", port.output
    assert agmem("memory", "get", "project.zip", "-p", PROJECT).stdout.strip() == "02134"
    full = json.loads(agmem("memory", "get", "current.task", "-p", PROJECT, "--json").stdout)
    assert full["value"] == "auth refactoring"
    assert full["accessCount"] == 1

    listed = agmem("memory", "list", "project.*", "-p", PROJECT).stdout.splitlines()
    assert listed == ["project.port\tproject\t3000", "project.zip\tproject\t02134"]
    tagged = agmem("memory", "list", "--tag", "auth", "-p", PROJECT).stdout.splitlines()
    assert tagged == ["current.task\tproject\tauth refactoring"]

    assert agmem("memory", "rm", "project.port", "-p", PROJECT).exit_code == 0
    missing = agmem("memory", "rm", "project.port", "-p", PROJECT)
    assert missing.exit_code == 1
    assert "no visible memory 'project.port'" in missing.output


def test_project_defaults_to_the_current_directory(agmem: Any, tmp_path: Path) -> None:
    assert agmem("memory", "set", "project.name", "here").exit_code == 0
    full = json.loads(agmem("memory", "get", "project.name", "--json").stdout)
    assert full["projectPath"] == str(tmp_path)


def test_user_errors_are_one_line(agmem: Any) -> None:
    unknown = agmem("memory", "get", "project.none", "-p", PROJECT)
    assert unknown.exit_code == 1
    assert unknown.stderr.startswith("agmem: error: no memory 'project.none' is visible here")
    assert len(unknown.stderr.strip().splitlines()) == 1
    bad_key = agmem("memory", "set", "a*b", "1", "-p", PROJECT)
    assert bad_key.exit_code == 1
    assert "wildcard" in bad_key.output
    session = agmem("memory", "set", "k", "1", "--scope", "session", "-p", PROJECT)
    assert session.exit_code == 1
    assert "sessionId" in session.output
    agmem("memory", "set", "project.v", "1", "-p", PROJECT)
    stale = agmem("memory", "set", "project.v", "2", "-p", PROJECT, "--if-version", "5")
    assert stale.exit_code == 1
    assert "is at version 1, not 5" in stale.output
    # JSON nested past Python's recursion limit was a RecursionError traceback; it is text.
    deep = "[" * 5000 + "]" * 5000
    stored = agmem("memory", "set", "project.deep", deep, "-p", PROJECT)
    assert stored.exit_code == 0, stored.output
    assert agmem("memory", "get", "project.deep", "-p", PROJECT).stdout.strip() == deep


def test_session_alone_writes_a_session_memory(agmem: Any) -> None:
    # `--session` says "(scope session)", but the write took the default scope, project, and
    # dropped the session: it overwrote the project's current.task, which every agent reads.
    agmem("memory", "set", "current.task", "shared plan", "-p", PROJECT)
    mine = agmem("memory", "set", "current.task", "my draft", "-p", PROJECT, "--session", "s1")
    assert mine.exit_code == 0, mine.output
    assert mine.stdout.strip() == f"created current.task (session in {PROJECT}), version 1"

    assert agmem("memory", "get", "current.task", "-p", PROJECT).stdout.strip() == "shared plan"
    seen_by_s1 = agmem("memory", "get", "current.task", "-p", PROJECT, "--session", "s1")
    assert seen_by_s1.stdout.strip() == "my draft"


def test_session_with_another_scope_is_a_usage_error(agmem: Any) -> None:
    refused = agmem(
        "memory", "set", "k", "1", "-p", PROJECT, "--session", "s1", "--scope", "project"
    )
    assert refused.exit_code == 2
    assert refused.stderr.strip() == (
        "agmem: error: --session names the session of a session memory; leave it out for "
        "--scope project"
    )
    assert agmem("memory", "get", "k", "-p", PROJECT).exit_code == 1  # nothing written


def test_resume_prints_the_briefing(agmem: Any) -> None:
    agmem("memory", "set", "project.framework", "Next.js", "-p", PROJECT)
    agmem("memory", "set", "current.task", "auth refactoring", "-p", PROJECT)
    agmem("memory", "set", "current.progress", "70", "-p", PROJECT)
    result = agmem("resume", "-p", PROJECT, "--budget", "100")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Working on Next.js project. 70% through auth refactoring."
    assert "  current.task: auth refactoring" in lines
    assert lines[-1].endswith("of 100 tokens)")


def test_rm_if_version_deletes_only_that_version(agmem: Any) -> None:
    agmem("memory", "set", "shared.plan", "mine", "--scope", "shared", "-p", PROJECT)
    agmem("memory", "set", "shared.plan", "theirs", "--scope", "shared", "-p", PROJECT)

    stale = agmem("memory", "rm", "shared.plan", "-p", PROJECT, "--if-version", "1")
    assert stale.exit_code == 1
    assert stale.stderr.strip() == (
        "agmem: error: memory 'shared.plan' is at version 2, not 1; read it again and retry"
    )
    assert agmem("memory", "get", "shared.plan", "-p", PROJECT).stdout.strip() == "theirs"

    current = agmem("memory", "rm", "shared.plan", "-p", PROJECT, "--if-version", "2")
    assert current.exit_code == 0, current.output
    assert agmem("memory", "get", "shared.plan", "-p", PROJECT).exit_code == 1


def test_list_prints_text_as_it_is_in_every_form(agmem: Any) -> None:
    # `list --json` and a structured value in the plain list were \u escapes, where `get --json`,
    # `resume` and `search --json` print the text itself.
    agmem("memory", "set", "project.note", "数据库 café", "-p", PROJECT)
    agmem("memory", "set", "project.owner", '{"name": "李雷"}', "-p", PROJECT)

    listed = agmem("memory", "list", "-p", PROJECT)
    as_json = agmem("memory", "list", "--json", "-p", PROJECT)

    assert listed.stdout.splitlines() == [
        "project.note\tproject\t数据库 café",
        'project.owner\tproject\t{"name": "李雷"}',
    ]
    assert '"value": "数据库 café"' in as_json.stdout
    assert [m["value"] for m in json.loads(as_json.stdout)] == ["数据库 café", {"name": "李雷"}]


def test_resume_prints_each_memory_on_its_line(agmem: Any) -> None:
    # A value of several lines was printed as it was: its lines at the margin, read as the next
    # memories, and a fence in it opened a code block over the rest of what a user pasted.
    agmem("memory", "set", "current.task", "fix auth\n```bash\nrm -rf build", "-p", PROJECT)
    agmem("memory", "set", "project.stack", "next\n\n# postgres", "-p", PROJECT)

    resumed = agmem("resume", "-p", PROJECT, "--budget", "200")

    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.splitlines() == [
        "Working on next # postgres project. Current task: fix auth ```bash rm -rf build.",
        "  project.stack: next # postgres",
        "  current.task: fix auth ```bash rm -rf build",
        "(40 of 200 tokens)",
    ]


def test_list_and_resume_print_no_terminal_escapes(agmem: Any) -> None:
    # A value an agent wrote may hold a retitling OSC or a screen clear: `list` and `resume`
    # printed them raw to the user's terminal. `get` prints the value itself, as `cat` would.
    value = "osc \x1b]0;PWNED\x07 title \x1b[2Jcleared café 数据库"
    agmem("memory", "set", "current.task", value, "-p", PROJECT, "--string")

    listed = agmem("memory", "list", "-p", PROJECT).stdout
    resumed = agmem("resume", "-p", PROJECT, "--budget", "100").stdout

    for output in (listed, resumed):
        assert "café 数据库" in output
        assert "PWNED" not in output
        assert not any(ord(ch) < 32 and ch not in "\t\n" or 127 <= ord(ch) < 160 for ch in output)
    stored = agmem("memory", "get", "current.task", "-p", PROJECT, "--json").stdout
    assert json.loads(stored)["value"] == value
