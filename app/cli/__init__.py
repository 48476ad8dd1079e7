"""The `agmem` command line."""

from __future__ import annotations

import typer

from app.cli import memory, search, server, sync, worker

cli = typer.Typer(
    name="agmem",
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


def main() -> None:
    cli()
