"""The MCP server over stdio: `agmem mcp` as a subprocess, driven by the real `mcp` client."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import psycopg
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from app.cli import cli
from tests.mcp.tools import exercise_every_tool, structured

AGMEM = str(Path(sys.executable).parent / "agmem")


def stdio_params(database_url: str, cwd: Path, *args: str) -> StdioServerParameters:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "AGMEM_HOME": str(cwd / "home"),
        # Info logs on (the default): they must go to stderr, never into the protocol on stdout.
        "AGMEM_LOG_LEVEL": "info",
    }
    env.pop("GEMINI_API_KEY", None)
    env.pop("AGMEM_API_TOKEN", None)
    return StdioServerParameters(command=AGMEM, args=["mcp", *args], env=env, cwd=str(cwd))


def test_every_tool_over_stdio(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    async def main() -> None:
        async with Client(stdio_params(database_url, tmp_path)) as client:
            await exercise_every_tool(client)

    asyncio.run(main())


def test_stdio_defaults_the_project_to_its_option(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    project.mkdir()

    async def main() -> None:
        params = stdio_params(database_url, tmp_path, "--project", str(project))
        async with Client(params) as client:
            written = structured(
                await client.call_tool("write_memory", {"key": "project.name", "value": "shop"})
            )
            assert written["memory"]["projectPath"] == str(project)

    asyncio.run(main())
    assert db.execute("SELECT project_path FROM memories").fetchall() == [(str(project),)]


def test_stdio_refuses_a_project_folder_that_is_not_there(tmp_path: Path) -> None:
    # It started anyway, and filed every memory of the agent under the mistyped path.
    missing = tmp_path / "shpo"
    result = CliRunner().invoke(cli, ["mcp", "--project", str(missing)])

    assert result.exit_code == 1
    assert result.stderr == f"agmem: error: project folder {missing} does not exist\n"
