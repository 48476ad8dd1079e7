"""`agmem worker [--concurrency N]` and `agmem worker retry-failed [--project P]`."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from app.cli.common import (
    check_provider,
    check_reachable,
    cli_errors,
    describe_location,
    given_project,
    open_database,
    refuse_a_schema_not_at_head,
    settings_or_exit,
    stop_on_signals,
)
from app.config import Settings

worker_app = typer.Typer(
    help="Compress observations, summarise sessions, embed new text, purge expired memories.",
    no_args_is_help=False,
)


async def run_worker(settings: Settings, url: str, *, concurrency: int | None) -> None:
    """Run one worker until SIGINT or SIGTERM; the job in hand finishes or gives its claim back."""
    from app.db.engine import make_async_engine, make_sessionmaker
    from app.db.supervisor import supervised
    from app.worker.loop import Worker

    engine = make_async_engine(url, pool_size=max(4, (concurrency or 1) + 2))
    stop = asyncio.Event()
    with stop_on_signals(stop):
        try:
            await check_reachable(engine)
            typer.echo(f"agmem: worker on {describe_location(settings, url)}", err=True)
            worker = Worker(
                settings=settings,
                sessionmaker=make_sessionmaker(engine),
                database_url=url,
                concurrency=concurrency,
            )
            async with supervised(settings.embedded_pgdata, url, engine.dispose):
                await worker.run(stop)
        finally:
            await engine.dispose()


@worker_app.callback(invoke_without_command=True)
def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", "-c", min=1, max=64, help="Jobs at once (AGMEM_WORKER_CONCURRENCY)."
        ),
    ] = None,
) -> None:
    """Run the worker until interrupted (Ctrl-C or SIGTERM)."""
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_or_exit()
    check_provider(settings)
    with cli_errors():
        url = open_database(settings)
        refuse_a_schema_not_at_head(settings, url)
        asyncio.run(run_worker(settings, url, concurrency=concurrency))


async def _retry(url: str, project: str | None) -> tuple[int, int, int]:
    from app.db.engine import make_async_engine, make_sessionmaker, transaction
    from app.worker.claims import retry_failed

    engine = make_async_engine(url, pool_size=1)
    try:
        async with transaction(make_sessionmaker(engine)) as session:
            return await retry_failed(session, project_path=project)
    finally:
        await engine.dispose()


@worker_app.command("retry-failed")
def retry_failed_command(
    project: Annotated[
        str | None,
        typer.Option(
            "--project", "-p", help="Only this project (made absolute).", callback=given_project
        ),
    ] = None,
) -> None:
    """Queue every failed observation and session again, with fresh attempts."""
    settings = settings_or_exit()
    with cli_errors():
        url = open_database(settings)
        observations, sessions, again = asyncio.run(_retry(url, project))
    line = f"requeued {observations} observations and {sessions} sessions"
    if again:
        line += f"; {again} summarised sessions will be summarised again with them"
    typer.echo(line)


def register(cli: typer.Typer) -> None:
    cli.add_typer(worker_app, name="worker")
