"""`agmem redact`: today's privacy rules applied to everything already stored."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from app.cli.common import cli_errors, open_database, settings_or_exit


def redact(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would change; change nothing.")
    ] = False,
) -> None:
    """Redact secrets stored before today's rules caught them (safe on a running service)."""
    settings = settings_or_exit()
    from app.db.engine import make_async_engine, make_sessionmaker, transaction
    from app.redaction import redact_stored
    from app.worker.rescan import mark_redacted

    with cli_errors():
        url = open_database(settings)

        async def go() -> str:
            engine = make_async_engine(url, pool_size=1)
            try:
                sessionmaker = make_sessionmaker(engine)
                report = await redact_stored(sessionmaker, dry_run=dry_run)
                if not dry_run:  # the worker's rescan after an upgrade is done too
                    async with transaction(sessionmaker) as session:
                        await mark_redacted(session)
            finally:
                await engine.dispose()
            return report.summary_line()

        line = asyncio.run(go())
    typer.echo(line)


def register(cli: typer.Typer) -> None:
    cli.command()(redact)
