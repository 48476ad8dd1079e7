"""`agmem search "query"`: ranked results with their paths and lines."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Annotated

import typer
from pydantic import ValidationError

from app.cli.common import (
    cli_errors,
    fail,
    given_project,
    open_database,
    settings_or_exit,
    terminal_text,
)
from app.config import Settings
from app.context.format import citation, one_line
from app.search.schemas import MAX_LIMIT, MAX_QUERY_CHARS, SearchMode, SearchRequest, SearchResponse


async def _run(settings: Settings, url: str, request: SearchRequest) -> SearchResponse:
    from app.db.engine import make_async_engine, make_sessionmaker
    from app.llm.embeddings import get_embedder
    from app.search.service import SearchTuning, search

    engine = make_async_engine(url, pool_size=1)
    try:
        async with make_sessionmaker(engine)() as session, session.begin():
            return await search(
                session,
                request=request,
                embedder=get_embedder(settings),
                tuning=SearchTuning.from_settings(settings),
            )
    finally:
        await engine.dispose()


def _interruptible(settings: Settings, url: str, request: SearchRequest) -> SearchResponse:
    """`_run`, ended at once by Ctrl-C: the query's embedding runs in a thread, waiting for
    Gemini's answer, and the loop's end waited for that thread (up to the 10 s timeout). The
    embedders closed there cancel the call it waits for."""
    from app.llm.embeddings import close_embedders

    with asyncio.Runner() as runner:
        try:
            return runner.run(_run(settings, url, request))
        except KeyboardInterrupt:
            close_embedders()
            raise


def _print(response: SearchResponse) -> None:
    if response.degraded:
        typer.echo(f"agmem: warning: {response.degraded}", err=True)
    if not response.results:
        typer.echo("no results")
        return
    for rank, hit in enumerate(response.results, start=1):
        cite = terminal_text(citation(hit))
        typer.echo(f"{rank:>2}. {hit.score:.4f}  [{hit.source}] {cite}")
        typer.echo(f"    {one_line(terminal_text(hit.snippet))[:200]}")
    typer.echo(f"({len(response.results)} results in {response.took_ms:.1f} ms)")


def _words(query: str) -> str:
    # A usage error like a missing query (exit 2), not the service's refusal (exit 1).
    if not query.strip():
        raise typer.BadParameter("the query is empty; give the words to search for")
    if len(query) > MAX_QUERY_CHARS:
        raise typer.BadParameter(
            f"it is {len(query)} characters long, over the {MAX_QUERY_CHARS} a search takes"
        )
    return query


def search_command(
    query: Annotated[str, typer.Argument(help="What to look for.", callback=_words)],
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            "-p",
            help="Project path (default: every project).",
            callback=given_project,
        ),
    ] = None,
    mode: Annotated[
        SearchMode, typer.Option(help="hybrid, vector, keyword or weighted.")
    ] = "hybrid",
    limit: Annotated[
        int, typer.Option(min=1, max=MAX_LIMIT, help="How many results (1-100).")
    ] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON.")] = False,
) -> None:
    """Search memory: files, transcripts, observations, summaries and kv memories."""
    settings = settings_or_exit()
    try:
        request = SearchRequest.model_validate(
            {"query": query, "projectPath": project, "mode": mode, "limit": limit}
        )
    except ValidationError as error:
        first = error.errors()[0]
        fail(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}", 2)
    with cli_errors():
        url = open_database(settings)
        response = _interruptible(settings, url, request)
    if as_json:
        body = response.model_dump(mode="json", by_alias=True)
        typer.echo(json.dumps(body, ensure_ascii=False, indent=2))
    else:
        _print(response)
    if project is not None and not response.results and not os.path.isdir(project):
        # Rows keep the path a client sent, so a project need not be a folder here (a server's
        # paths, a folder since removed); but with nothing found, a typo is the likely cause.
        typer.echo(
            f"agmem: warning: there is no folder {project}: is the --project path right?", err=True
        )


def register(cli: typer.Typer) -> None:
    cli.command("search")(search_command)
