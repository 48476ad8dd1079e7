"""`agmem memory get|set|list|rm`, `agmem resume` and `agmem mcp` (the MCP server over stdio).

They work on the database directly, like `agmem status`. `--project` defaults to the current
directory, which is what an agent launching `agmem mcp` from a project folder expects.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from app import exactjson
from app.cli.common import (
    check_provider,
    cli_errors,
    current_folder,
    fail,
    given_project,
    open_database,
    settings_or_exit,
    storable_project,
    terminal_text,
)
from app.config import Settings
from app.entry import raise_terminated_by_deadline, signalled
from app.errors import first_line, validator_reason
from app.memories.patterns import is_pattern
from app.memories.schemas import (
    MAX_TTL_SECONDS,
    Memory,
    MemoryWrite,
    Resume,
    Scope,
    check_key,
    tag_filter,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.memories.service import Visibility
    from app.state import AppState

T = TypeVar("T")

# app.memories.service.MAX_LIST_LIMIT, written out so that defining the options does not import
# the service (tests/cli/test_imports.py checks that they agree).
MAX_LIST_LIMIT = 1000

memory_cli = typer.Typer(
    help="Read and write key/value memories (project.*, current.*, shared.*, ai.<name>.*).",
    no_args_is_help=True,
)

ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project",
        "-p",
        help="Project path (default: current directory).",
        callback=given_project,
    ),
]


def _given_session(value: str | None) -> str | None:
    """`--session "$SESSION"` with the variable unset: refused as `--project ''` is, instead of
    `set`'s "scope 'session' needs sessionId" (exit 1) and reads that matched no session."""
    if value is not None and not value.strip():
        raise typer.BadParameter("is empty; give the session id, or leave the option out")
    return value


SessionOpt = Annotated[
    str | None,
    typer.Option("--session", help="Session id (scope session).", callback=_given_session),
]
ScopeOpt = Annotated[Scope | None, typer.Option(help="global, project, session or shared.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the full memory as JSON.")]


def _project(project: str | None) -> str:
    return project or current_folder()  # made absolute by the option's callback


async def _with_state(settings: Settings, url: str, work: Callable[[AppState], Awaitable[T]]) -> T:
    from app.db.engine import make_async_engine, make_sessionmaker
    from app.memories.resume import briefing_client
    from app.state import AppState

    engine = make_async_engine(url, pool_size=2)
    briefings = briefing_client(settings)
    state = AppState(
        settings=settings,
        database_url=url,
        engine=engine,
        sessionmaker=make_sessionmaker(engine),
        briefing_client=briefings,
    )
    try:
        return await work(state)
    finally:
        await briefings.close()  # never raises: the dispose still runs
        await engine.dispose()


def run(work: Callable[[AsyncSession, Settings], Awaitable[T]]) -> T:
    """Run `work` in one transaction on the configured database; errors become one line."""
    settings = settings_or_exit()
    from app.db.engine import transaction

    async def in_transaction(state: AppState) -> T:
        async with transaction(state.sessionmaker) as session:
            return await work(session, settings)

    with cli_errors():
        url = open_database(settings)
        try:
            return asyncio.run(_with_state(settings, url, in_transaction))
        except ValidationError as error:
            first = error.errors()[0]
            fail(f"{'.'.join(str(p) for p in first['loc'])}: {validator_reason(first['msg'])}")
        except ValueError as error:
            fail(str(error))


def _show(memory: Memory, as_json: bool) -> None:
    if as_json:
        typer.echo(memory.model_dump_json(by_alias=True, indent=2))
    elif isinstance(memory.value, str):
        typer.echo(memory.value)
    else:
        typer.echo(exactjson.dumps(memory.value, ensure_ascii=False, indent=2))


def _visibility(scope: Scope | None, project: str | None, session: str | None) -> Visibility:
    from app.memories.service import Visibility

    return Visibility(scope=scope, project_path=_project(project), session_id=session)


@memory_cli.command("get")
def get(
    key: Annotated[str, typer.Argument(help="Exact key, or a pattern with * (project.*).")],
    project: ProjectOpt = None,
    session: SessionOpt = None,
    scope: ScopeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a memory's value (the most specific visible one); patterns print every match."""

    async def work(db: AsyncSession, _: Settings) -> list[Memory]:
        from app.memories import service
        from app.memories.reads import read_in_session

        seen_by = _visibility(scope, project, session)
        if is_pattern(key):
            rows = await service.find_memories(db, visibility=seen_by, pattern=key)
            return [service.to_schema(row) for row in rows]
        return [
            service.to_schema(await read_in_session(db, key=check_key(key), visibility=seen_by))
        ]

    memories = run(work)
    if not memories:
        fail(f"no visible memory matches {key!r}")
    if is_pattern(key):
        _print_list(memories, as_json)
    else:
        _show(memories[0], as_json)


@memory_cli.command("set")
def set_(
    key: Annotated[str, typer.Argument(help="Hierarchical key, e.g. current.task.")],
    value: Annotated[str, typer.Argument(help='JSON (3000, ["a"], {...}) or plain text.')],
    project: ProjectOpt = None,
    session: SessionOpt = None,
    scope: Annotated[
        Scope | None,
        typer.Option(
            help="global, project, session or shared (default: session with --session, "
            "else project)."
        ),
    ] = None,
    ttl: Annotated[
        int | None, typer.Option(min=1, max=MAX_TTL_SECONDS, help="Seconds until it expires.")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    created_by: Annotated[str | None, typer.Option("--by", help="Who writes it.")] = None,
    as_string: Annotated[bool, typer.Option("--string", help="Store VALUE as text.")] = False,
    if_version: Annotated[
        int | None,
        typer.Option(min=0, help="Fail unless the stored version is this (0: create only)."),
    ] = None,
) -> None:
    """Write a memory; an existing key is updated and its previous value kept."""
    scope = _write_scope(scope, session)
    project_path = storable_project(_project(project))
    parsed: Any = value
    if not as_string:
        try:
            # Its numbers as written (app/exactjson.py): `json` made `1.50` 1.5, `1e400`
            # Infinity (refused), and an integer of 5,000 digits a string (its parse failed).
            parsed = exactjson.loads(value)
        except (ValueError, RecursionError):
            parsed = value

    async def work(db: AsyncSession, settings: Settings) -> tuple[Memory, bool]:
        from app.memories import service

        fields: dict[str, Any] = {
            "value": parsed,
            "scope": scope,
            "project_path": project_path,
        }
        optional = {"session_id": session, "ttl": ttl, "tags": tag, "created_by": created_by}
        fields |= {name: v for name, v in optional.items() if v is not None}
        data = MemoryWrite.model_validate(fields)
        row, created = await service.write_memory(
            db, key=check_key(key), data=data, settings=settings, if_version=if_version
        )
        return service.to_schema(row), created

    memory, created = run(work)
    where = f" in {memory.project_path}" if memory.project_path else ""
    action = "created" if created else "updated"
    typer.echo(f"{action} {memory.key} ({memory.scope}{where}), version {memory.version}")


def _one_line(text: str) -> str:
    return " ".join(terminal_text(text).split())


def _write_scope(scope: Scope | None, session: str | None) -> Scope:
    """The scope a `set` writes: `--session` alone means a session memory. It took the default
    scope, project, and dropped the session, so a note meant for one session overwrote the
    project's memory of that key, which every agent reads and search serves."""
    if scope is None:
        return "session" if session is not None else "project"
    if session is not None and scope != "session":
        fail(
            f"--session names the session of a session memory; leave it out for --scope {scope}",
            2,
        )
    return scope


def _print_list(memories: list[Memory], as_json: bool) -> None:
    if as_json:
        listed = [m.model_dump(mode="json", by_alias=True) for m in memories]
        typer.echo(exactjson.dumps(listed, ensure_ascii=False, indent=2))
        return
    for memory in memories:
        value = memory.value
        shown = value if isinstance(value, str) else exactjson.dumps(value, ensure_ascii=False)
        shown = _one_line(shown)
        key = terminal_text(memory.key)
        typer.echo(f"{key}\t{memory.scope}\t{shown[:80]}{'…' if len(shown) > 80 else ''}")


@memory_cli.command("list")
def list_(
    pattern: Annotated[str | None, typer.Argument(help="Key pattern with * wildcards.")] = None,
    project: ProjectOpt = None,
    session: SessionOpt = None,
    scope: ScopeOpt = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Required tag (repeatable).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST_LIMIT)] = 100,
    as_json: JsonOpt = False,
) -> None:
    """List visible memories: key, scope and the start of the value."""

    async def work(db: AsyncSession, _: Settings) -> list[Memory]:
        from app.memories import service

        rows = await service.find_memories(
            db,
            visibility=_visibility(scope, project, session),
            pattern=pattern,
            tags=tag_filter(tag),
            limit=limit,
        )
        return [service.to_schema(row) for row in rows]

    _print_list(run(work), as_json)


@memory_cli.command("rm")
def rm(
    key: Annotated[str, typer.Argument(help="Exact key to delete.")],
    project: ProjectOpt = None,
    session: SessionOpt = None,
    scope: ScopeOpt = None,
    if_version: Annotated[
        int | None, typer.Option(min=1, help="Fail unless the stored version is this.")
    ] = None,
) -> None:
    """Delete the memory `get KEY` would show."""

    async def work(db: AsyncSession, _: Settings) -> bool:
        from app.memories import service

        visibility = _visibility(scope, project, session)
        return await service.delete_memory(
            db, key=check_key(key), visibility=visibility, if_version=if_version
        )

    if not run(work):
        fail(f"no visible memory {key!r} to delete")
    typer.echo(f"deleted {key}")


def resume(
    project: ProjectOpt = None,
    session: SessionOpt = None,
    budget: Annotated[int, typer.Option(min=50, max=20_000, help="Token budget.")] = 500,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole answer (as POST /api/resume) as JSON.")
    ] = False,
) -> None:
    """Print a short briefing for resuming work on a project, within a token budget."""
    from app.memories import resume as resume_service

    async def work(db: AsyncSession, settings: Settings) -> Resume:
        return await resume_service.smart_resume(
            db,
            settings=settings,
            project_path=_project(project),
            session_id=session,
            budget=budget,
        )

    answer = run(work)
    if as_json:
        typer.echo(answer.model_dump_json(by_alias=True, indent=2))
        return
    # Agents write these values: an escape in one (a retitling OSC, a screen clear) is not for
    # the user's terminal. `get` prints the value itself, as `cat` would. Each on one line, as
    # `list` prints them: a value's own lines stood at the margin like the next memories, and a
    # fence in one opened a code block over the rest of what a user pasted into a prompt.
    typer.echo(_one_line(answer.briefing))
    for memories in answer.context.model_dump().values():
        for memory in memories:
            value = memory["value"]
            shown = value if isinstance(value, str) else exactjson.dumps(value, ensure_ascii=False)
            typer.echo(f"  {_one_line(memory['key'])}: {_one_line(shown)}")
    typer.echo(f"({answer.token_count} of {answer.budget} tokens)")


def mcp(project: ProjectOpt = None) -> None:
    """Serve the MCP memory tools over stdio (point your agent's MCP config at `agmem mcp`)."""
    if sys.stdout is None:
        # Python's stdout when fd 1 was closed (`agmem mcp >&-`): the SDK's transport read its
        # `.buffer`, an AttributeError traceback once the database had been opened.
        fail("stdout is closed: an MCP client reads the answers there")
    default_project = _project(project)
    if not os.path.isdir(default_project):
        # A typo in an agent's MCP config would otherwise file every memory under a project that
        # is not there, silently: the agent launching us only sees the server start.
        problem = "is not a folder" if os.path.exists(default_project) else "does not exist"
        fail(f"project folder {default_project} {problem}")
    settings = settings_or_exit()
    check_provider(settings)
    # Imported once the command will run: a refusal above paid ~1 s of CPU for the MCP SDK.
    from app.db.supervisor import supervised
    from app.mcp.server import serve_stdio
    from app.warmup import warm_up

    with cli_errors():
        url = open_database(settings)

        async def work(state: AppState) -> None:
            # What a server pays at its start (app/main.py) and the command line defers: paid
            # here beside the client's first messages, not by its first long write (the
            # scanners' compile, ~0.1 s) or its first resume with a Gemini key (google-genai's
            # import, ~0.3-0.4 s). Not awaited: the exit joins it.
            asyncio.get_running_loop().run_in_executor(None, warm_up, settings)
            # An agent keeps its MCP server for its whole session, maybe the only process left
            # using the embedded server.
            pgdata = settings.embedded_pgdata
            async with supervised(pgdata, url, state.drop_dead_connections) as state.supervisor:
                await serve_stdio(state, default_project=default_project)

        # Its client stopping it (SIGTERM, or Ctrl-C in a terminal) is how a stdio server ends,
        # like the end of its input: exit 0, as serve, the worker and `sync --watch` do; an end
        # that hangs is cut short by a deadline (app/entry.py).
        signal.signal(signal.SIGTERM, raise_terminated_by_deadline)
        try:
            asyncio.run(_with_state(settings, url, work))
        except KeyboardInterrupt:
            signalled()  # one more while the embedded server stops at exit stops it at once
        except BaseExceptionGroup as group:
            refused = _write_refused(group)
            if refused is None:
                raise
            fail(f"cannot write to stdout: {first_line(refused)}")


def _write_refused(group: BaseExceptionGroup[BaseException]) -> OSError | None:
    """The OSError of the SDK's stdout writer (`agmem mcp > /dev/full`, a full disk), which
    leaves the transport's task group inside an exception group: a traceback of the group."""
    matched, rest = group.split(OSError)
    while matched is not None and rest is None:
        inner = matched.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner if isinstance(inner, OSError) else None
        matched = inner
    return None


def register(cli: typer.Typer) -> None:
    cli.add_typer(memory_cli, name="memory")
    cli.command()(resume)
    cli.command()(mcp)
