"""Every long-running command restarts the embedded server it uses if it dies, as `agmem serve`
does: an agent's `agmem mcp` or a `sync --watch` may be the last process using it."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.db.supervisor import EmbeddedSupervisor
from tests.sync.helpers import make_project


@pytest.fixture
def supervised(
    monkeypatch: pytest.MonkeyPatch, database_url: str
) -> tuple[list[Path], dict[str, str | None]]:
    """Supervisors started (their data folders); the command runs on the test database as if
    it were the embedded one. A supervisor started stops a watch as SIGTERM would."""
    started: list[Path] = []

    async def run(self: EmbeddedSupervisor, stop: asyncio.Event) -> None:
        started.append(self.pgdata)
        # The watch's handler (an event loop's, set by `loop.add_signal_handler`); never one a
        # test runner or CI wrapper installed, which a real SIGTERM would reach.
        handler = signal.getsignal(signal.SIGTERM)
        if getattr(handler, "__module__", None) == "asyncio.unix_events":
            os.kill(os.getpid(), signal.SIGTERM)
        await stop.wait()

    monkeypatch.setattr(EmbeddedSupervisor, "run", run)
    # The sync command freezes the heap (gc.freeze) for its long run: not the test process's.
    monkeypatch.setattr("app.heap.freeze_heap", lambda: None)
    for command in ("memory", "sync"):
        monkeypatch.setattr(f"app.cli.{command}.open_database", lambda *_a, **_k: database_url)
    env: dict[str, str | None] = {"DATABASE_URL": None, "GEMINI_API_KEY": ""}
    return started, env


@pytest.mark.parametrize("command", ["mcp", "sync --watch"])
def test_a_long_running_command_supervises_the_embedded_server(
    supervised: tuple[list[Path], dict[str, str | None]], tmp_path: Path, db: Any, command: str
) -> None:
    started, env = supervised
    home = tmp_path / "home"
    # mcp ends at the end of its input, the watch at the SIGTERM the fake supervisor sends.
    project = str(make_project(tmp_path / "proj"))
    args = ["mcp", "--project", project] if command == "mcp" else ["sync", "-p", project, "--watch"]
    result = CliRunner().invoke(cli, args, input="", env={**env, "AGMEM_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert started == [home / "pgdata"]


def test_no_supervisor_on_an_external_database(
    supervised: tuple[list[Path], dict[str, str | None]], tmp_path: Path, database_url: str
) -> None:
    started, env = supervised
    env = {**env, "DATABASE_URL": database_url, "AGMEM_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(cli, ["mcp", "--project", str(tmp_path)], input="", env=env)
    assert result.exit_code == 0, result.output
    assert started == []
