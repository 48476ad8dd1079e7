"""The `agmem` command line.

Every command starts a fresh process, so the command modules import at module level only what
defining their options needs; each command imports its implementation (FastAPI, Alembic, the
Gemini client, the text splitters, the MCP server, ...) when it runs. `agmem status` then does
not pay for `agmem serve`'s imports.
"""

from __future__ import annotations

import typer

# First, so that structlog is imported with rich hidden (app/logs.py) whichever module a
# command imports first: `agmem mcp` imported the MCP server and the supervisor, which import
# structlog, before its settings brought in app.logs, and paid rich's ~0.1 s of CPU.
import app.logs  # noqa: F401
from app.cli import memory, redact, search, server, sync, worker
from app.cli.common import OneLineErrors

cli = typer.Typer(
    name="agmem",
    cls=OneLineErrors,
    help="antigravity-mem: memory for AI coding agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
server.register(cli)
worker.register(cli)
sync.register(cli)
search.register(cli)
memory.register(cli)
redact.register(cli)


def main() -> None:
    from app.entry import main as run

    run()
