"""`agmem sync`: index a project's memory files and transcripts now (or on every change)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.common import (
    check_reachable,
    cli_errors,
    current_folder,
    fail,
    given_project,
    open_database,
    settings_or_exit,
    stop_on_signals,
    storable_project,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from app.config import Settings
    from app.sync.report import SyncReport


def sync(
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            "-p",
            help="Project folder (default: current folder).",
            callback=given_project,
        ),
    ] = None,
    memory_dir: Annotated[
        str | None,
        typer.Option(
            "--memory-dir",
            help="Memory root: the folder holding MEMORY.md and memory/ (default: the project), "
            "relative to the project or absolute.",
        ),
    ] = None,
    sessions_dir: Annotated[
        str | None,
        typer.Option("--sessions-dir", help="Transcripts folder, relative or absolute."),
    ] = None,
    forget_dirs: Annotated[
        list[str] | None,
        typer.Option(
            "--forget-dir",
            help="Drop what was indexed from this memory root or transcripts folder (relative "
            "to the project or absolute; it may be gone). Repeatable. A sync deletes only the "
            "files of its own folders otherwise.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Re-read and re-chunk every file.")
    ] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Keep syncing on every change.")] = False,
    reembed: Annotated[
        bool, typer.Option("--reembed", help="Re-embed chunks made by another model.")
    ] = False,
    prune_missing: Annotated[
        bool,
        typer.Option(
            "--prune-missing",
            help="The project's folder is gone: drop its indexed files (sessions, observations "
            "and memories are kept).",
        ),
    ] = False,
) -> None:
    """Index MEMORY.md, memory/**/*.md and session transcripts into the search index."""
    settings = settings_or_exit()
    from rich.console import Console

    from app.db.engine import make_async_engine, make_sessionmaker
    from app.db.supervisor import supervised
    from app.heap import freeze_heap
    from app.llm.embeddings import get_embedder
    from app.sync.indexer import (
        ForgetsItsOwnRoot,
        ProjectFolderMissing,
        SyncRequest,
        sync_project,
    )
    from app.sync.watch import watch_project

    folder = project or current_folder()  # made absolute by the option's callback
    storable_project(folder)  # a bound check only: the folder is read as it is spelled on disk
    if prune_missing:
        if watch or force or reembed or memory_dir or sessions_dir or forget_dirs:
            fail("--prune-missing takes no other option than --project")
        _prune(settings, folder)
        return
    if forget_dirs and watch:
        # Forgetting is once: a watch's syncs look only at the paths their events name.
        fail("--forget-dir takes no --watch: forget with a one-shot sync, then watch")
    request = SyncRequest(
        project_path=folder,
        memory_dir=memory_dir,
        sessions_dir=sessions_dir,
        force=force,
        reembed=reembed,
        forget_dirs=tuple(forget_dirs or ()),
    )
    # soft_wrap: a long path stays on its line (rich wrapped at 80 columns when piped); no emoji
    # codes: a path holding ":fire:" was printed with 🔥.
    console = Console(stderr=True, emoji=False, soft_wrap=True)
    with cli_errors():
        url = open_database(settings)
        embedder = get_embedder(settings)
        # A full collection walked the ~130,000 objects of the libraries and the model, 80-160 ms
        # that fell inside whichever sync it hit (docs/benchmarks.md, Sync).
        freeze_heap()

        async def go() -> None:
            engine = make_async_engine(url, pool_size=2)
            sessionmaker = make_sessionmaker(engine)
            try:
                with _progress(console) as bar:
                    task = bar.add_task("sync", total=None)

                    def advance(phase: str, done: int, total: int) -> None:
                        bar.update(task, description=phase, completed=done, total=total)

                    if watch:
                        stop = asyncio.Event()
                        # Ctrl-C, and the SIGTERM of kill, systemd and docker stop, end the watch
                        # normally: with SIGTERM's default action the process died without its
                        # exit handlers, and the embedded PostgreSQL it started kept running.
                        with stop_on_signals(stop):
                            await check_reachable(engine)
                            console.print(
                                f"watching {request.project_path} (Ctrl-C to stop)", markup=False
                            )
                            # The connections it keeps between syncs are checked before each use.
                            async with supervised(settings.embedded_pgdata, url, engine.dispose):
                                await watch_project(
                                    sessionmaker,
                                    settings,
                                    embedder,
                                    request,
                                    on_report=lambda r: _print_report(console, r),
                                    stop=stop,
                                    progress=advance,
                                )
                    else:
                        report = await sync_project(
                            sessionmaker, settings, embedder, request, progress=advance
                        )
                        bar.update(task, visible=False)
                        _print_report(console, report)
            finally:
                await engine.dispose()

        # Ctrl-C (or SIGTERM) is a KeyboardInterrupt only outside the watch, whose loop handles
        # both as its normal stop: a one-shot sync cut short ends as an interrupted command (exit
        # 130), not as a success without its summary line.
        try:
            asyncio.run(go())
        except (ProjectFolderMissing, ForgetsItsOwnRoot) as error:
            fail(str(error))


def _prune(settings: Settings, folder: str) -> None:
    from rich.console import Console

    from app.sync.prune import ProjectFolderPresent, prune_missing

    console = Console(stderr=True, emoji=False, soft_wrap=True)

    def announce(files: int, chunks: int) -> None:
        console.print(
            f"dropping {files} indexed files ({chunks} chunks) of {folder}: its folder is gone; "
            "its sessions, observations and memories are kept",
            markup=False,
            highlight=False,
        )

    with cli_errors():
        url = open_database(settings)
        try:
            dropped = asyncio.run(prune_missing(url, folder, announce))
        except ProjectFolderPresent as error:
            fail(str(error))
    typer.echo(f"dropped {dropped} files")


def _progress(console: Console) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        # Piped or in a log (no terminal), the bar is never drawn but still printed a blank line
        # when it stopped: before the error of a failed sync, after the report of a good one.
        disable=not console.is_terminal,
    )


def _print_report(console: Console, report: SyncReport) -> None:
    from rich.markup import escape

    # Paths and errors are escaped: rich would read a "[beta]" in a path as a style and drop it,
    # and fail on a "[/b]".
    for skip in report.skipped[:20]:
        console.print(f"skipped {escape(skip.path)}: {escape(skip.reason)}", highlight=False)
    if len(report.skipped) > 20:
        console.print(f"… and {len(report.skipped) - 20} more skipped", highlight=False)
    if report.transcript_items:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(report.transcript_items.items()))
        console.print(f"transcripts: passed over or trimmed {counts}", highlight=False)
    for error in report.errors:
        console.print(f"[yellow]warning[/yellow]: {escape(error)}", highlight=False)
    for warning in report.warnings:
        console.print(f"[yellow]warning[/yellow]: {escape(warning)}", highlight=False)
    typer.echo(report.summary_line())


def register(cli: typer.Typer) -> None:
    cli.command()(sync)
