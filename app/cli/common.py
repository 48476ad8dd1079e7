"""What every command shares: one-line errors, settings, and opening the database."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote, urlencode

import typer
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from typer.core import TyperGroup

from app.api.limits import stored_project_path
from app.config import Settings, SettingsError, load_settings
from app.entry import Terminated, interrupted, signal_while_exiting, signalled
from app.errors import AppError, first_line, sqlstate, validator_reason

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"agmem: error: {message}", err=True)
    raise typer.Exit(code)


class OneLineErrors(TyperGroup):
    """The `agmem` group: a usage error (unknown option, bad value, missing argument) is one line
    and exit 2, like every other error, instead of click's usage text and a boxed message."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        run = {
            "args": args,
            "prog_name": prog_name,
            "complete_var": complete_var,
            "windows_expand_args": windows_expand_args,
        } | extra
        if not standalone_mode:
            return super().main(standalone_mode=False, **run)
        try:
            self._run_to_exit(run)
        except BrokenPipeError:  # an error's line, to a stderr nobody reads any more
            sys.exit(reader_gone())

    def _run_to_exit(self, run: dict[str, Any]) -> NoReturn:
        try:
            result = super().main(standalone_mode=False, **run)
        except typer.TyperException as error:
            # typer vendors click (`typer._click`, private) and exports none of its exception
            # classes but BadParameter; every one of them is a public `TyperException`. A usage
            # error is the one carrying the context of the command it was raised in.
            context = getattr(error, "ctx", None)
            if type(error).__name__ == "NoArgsIsHelpError":
                # Its message is the help text (typer's own rich_utils tells it by name too).
                typer.echo(error.format_message(), err=True)
                sys.exit(error.exit_code)
            hint = f" (see '{context.command_path} --help')" if context is not None else ""
            # typer checks a Literal or Enum option through pydantic.
            message = validator_reason(error.format_message())
            typer.echo(f"agmem: error: {message}{hint}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            typer.echo("agmem: aborted", err=True)
            sys.exit(1)
        # Without standalone mode, click returns an Exit's code instead of exiting with it.
        sys.exit(result if isinstance(result, int) else 0)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _quiet_when_the_reader_goes():  # --help prints here
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:  # click's Context, which typer does not export
        try:
            with _quiet_when_the_reader_goes():
                return super().invoke(ctx)
        except KeyboardInterrupt as interrupt:
            # typer made it exit 130 without a word, whatever the signal (app.entry.Terminated).
            raise typer.Exit(interrupted(interrupt)) from None


@contextmanager
def _quiet_when_the_reader_goes() -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise typer.Exit(reader_gone()) from None
    except SystemExit as exiting:
        # rich's Console (status, sync's report, typer's help) handles the error itself: it
        # raises SystemExit(1) while handling it (`Console.on_broken_pipe`).
        if isinstance(exiting.__context__, BrokenPipeError):
            raise typer.Exit(reader_gone()) from None
        raise
    except OSError as error:
        # A command's own OSErrors are one line already (`cli_errors`); what comes this far is
        # mostly its output failing: stdout on a full disk or a failing device (`agmem memory
        # list > out.txt`: ENOSPC, EIO), which was a traceback of 40 lines. Any other errno
        # (the current folder removed under the command) is not the output's fault.
        if error.errno not in _WRITE_ERRNOS:
            fail(first_line(error))
        _output_failed(error)


# What a write to stdout fails with when the file or device behind it cannot take more.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EPIPE})


def _output_failed(error: OSError) -> NoReturn:
    typer.echo(f"agmem: error: cannot write the output: {first_line(error)}", err=True)
    raise typer.Exit(_output_dropped()) from None


def _is_stdout_failing(error: OSError) -> bool:
    """`error` is most likely stdout's own: a write errno, raised by a write to a file
    descriptor (no file name, unlike an open or a mkdir). Python drops what a failed flush
    held, so stdout cannot be asked again; the database's own full disk comes as its error."""
    return error.errno in _WRITE_ERRNOS and error.filename is None


def _output_dropped() -> int:
    """Exit 1, stdout leading to /dev/null from now on: what it still holds would fail again
    in Python's own flush at exit ("Exception ignored …", exit 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):  # not a real file (a test's runner)
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 1


def reader_gone() -> int:
    """Stop writing to a pipe whose reader has gone (`agmem status | head -1`), as a tool killed by
    SIGPIPE stops: without a word, exit 141 in a shell's terms. typer exited 1, an error's code,
    and an error raised inside a command said "agmem: error: [Errno 32] Broken pipe". Both streams
    then lead nowhere, so that nothing left in a buffer fails again when Python exits."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # not a real file (a test's runner)
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def given_project(value: str | None) -> str | None:
    """Every `--project` option's callback: the path made absolute (`absolute_project`), and an
    empty one refused (`-p "$PROJECT"` with the variable unset meant the current folder to sync,
    memory and mcp, and every project to search and retry-failed)."""
    if value is None:
        return None
    if not value.strip():
        raise typer.BadParameter("is empty; give the project folder, or leave the option out")
    try:
        return absolute_project(value)
    except FileNotFoundError:  # a relative path, made absolute from a folder removed since
        raise typer.BadParameter(
            "is relative and the current folder no longer exists; give an absolute path"
        ) from None


def absolute_project(path: str | os.PathLike[str]) -> str:
    """A project path as the service stores it: absolute, `~` expanded, `..` folded. Rows carry
    the absolute path a client sent, so a relative `--project .` would match nothing."""
    return os.path.abspath(os.path.expanduser(path))


def current_folder() -> str:
    """The current folder, the default project, if it can be one. A project is stored as its
    UTF-8 path; run from a Latin-1 folder, `agmem sync` was a UnicodeEncodeError traceback and
    `memory set` stored the memory under U+FFFD in place of the byte, a project no folder is."""
    try:
        folder = os.getcwd()
    except FileNotFoundError:  # removed since the shell entered it
        fail("the current folder no longer exists; give the project with --project", 2)
    try:
        folder.encode("utf-8")
    except UnicodeEncodeError:
        fail(
            f"the current folder {os.fsencode(folder)!r} is not UTF-8 text, which a project path "
            "must be; rename the folder, or give another project with --project",
            2,
        )
    return folder


def storable_project(path: str) -> str:
    """The project key `path` is stored under, if the service can store it (app/api/limits.py):
    said here, by a command that stores one, rather than as Postgres's refusal halfway through a
    sync. Commands that only read take any path, as the HTTP API's filters do: a project stored
    before the bound is still named. The key is no folder name to open: it is NFC and trimmed."""
    try:
        return stored_project_path(path)
    except ValueError as error:
        fail(f"project path: {error}", 2)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn the errors a user can cause into one line and a non-zero exit, never a traceback."""
    try:
        yield
    except (typer.Exit, typer.Abort, KeyboardInterrupt, BrokenPipeError):
        raise
    except SettingsError as error:
        fail(str(error), 2)
    except (sa_exc.OperationalError, sa_exc.InterfaceError) as error:
        fail(f"database unreachable: {first_line(error)}")
    except sa_exc.ArgumentError as error:
        fail(f"invalid setting DATABASE_URL: {first_line(error)}", 2)
    except (sa_exc.ProgrammingError, sa_exc.NotSupportedError) as error:
        fail(database_refused(error))
    except AppError as error:
        fail(error.detail)
    except OSError as error:
        if _is_stdout_failing(error):  # `agmem status > /dev/full`: said as every command says it
            _output_failed(error)
        fail(first_line(error))
    except Exception as error:
        if _is_psycopg(error, "OperationalError"):
            fail(f"database unreachable: {first_line(error)}")
        if _is_psycopg(error, "ProgrammingError", "NotSupportedError"):
            fail(database_refused(error))
        raise


# SQLSTATEs of a schema that is missing or behind the code: undefined table, column, function.
_SCHEMA_BEHIND = {"42P01", "42703", "42883"}


def database_refused(error: Exception) -> str:
    """A statement the database refused for what it is, not for what agmem sent: a DATABASE_URL
    whose schema was never migrated (or is behind), a role that may not create tables, a server
    without pgvector ("extension "vector" is not available"). Every command but `status` was a
    traceback; now one line, naming `agmem migrate` when the schema is the cause."""
    hint = (
        "; the schema is missing or behind: run `agmem migrate`"
        if sqlstate(error) in _SCHEMA_BEHIND
        else ""
    )
    return f"the database refused: {first_line(error)}{hint}"


def _is_psycopg(error: Exception, *names: str) -> bool:
    """An error of psycopg's own (one of its classes `names`), which `agmem sync` meets unwrapped:
    it opens its connections with psycopg, not through SQLAlchemy. Looked up, not imported: no
    command pays for importing the driver to define its error handling, and an error of
    psycopg's can only come once it is imported."""
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(error, tuple(getattr(psycopg, n) for n in names))


def settings_or_exit() -> Settings:
    from app.logs import configure_logging

    try:
        settings = load_settings()
    except SettingsError as error:
        fail(str(error), 2)
    configure_logging(settings.log_level)
    return settings


def check_provider(settings: Settings) -> None:
    """A long-running command refuses to start on an embedding provider it cannot build: `serve`
    started, said "ok" on /health and answered every search 503, a keyword search too, and the
    worker left every new row without a vector."""
    from app.llm.embeddings import check_embedder

    with cli_errors():
        check_embedder(settings)


# Query parameters libpq reads as secrets: `?password=` is the userinfo's password spelt
# another way (a socket URL has no userinfo to put it in), `sslpassword` a client key's.
SECRET_QUERY_PARAMETERS = frozenset({"password", "sslpassword"})


def describe_location(settings: Settings, url: str) -> str:
    """The database as `serve`, `worker` and `status` print it: with no password, wherever the
    URL gives it (only the userinfo's was masked; a `?password=` was printed in clear)."""
    if settings.database_url is None:
        return f"embedded PostgreSQL in {settings.pgdata}"
    parsed = make_url(url)
    masked = {
        name: "***" if name.lower() in SECRET_QUERY_PARAMETERS else value
        for name, value in parsed.query.items()
    }
    shown = parsed.set(query={}).render_as_string(hide_password=True)
    if not masked:
        return shown
    return f"{shown}?{urlencode(masked, doseq=True, safe='/*', quote_via=quote)}"


def open_database(
    settings: Settings, *, migrate_embedded: bool = True, upgrade_existing: bool = True
) -> str:
    """Resolve the database URL. The embedded database is ours, so it is brought to head here;
    an external DATABASE_URL is migrated only by `agmem migrate` or `agmem serve`.

    Without `upgrade_existing` only a new (empty) embedded database is migrated: `agmem status`
    looks, and must not undo an `agmem migrate --down` an older build's error advised."""
    from app.db.engine import resolve_database_url
    from app.db.revision import at_head

    url = resolve_database_url(settings)
    # Alembic is loaded only for a database not at head (app/db/revision.py), as by `agmem
    # serve`: at head on every start but the first after an upgrade of agmem.
    if settings.database_url is None and migrate_embedded and not at_head(url):
        from app.db import migrate

        current = migrate.current_revision(url)
        if current is not None and not upgrade_existing:
            return url
        migrate.upgrade(url)
        if current is not None:
            # A schema taken down on purpose (`agmem migrate --down`) comes back up here: say so.
            typer.echo(
                f"agmem: brought the embedded database's schema from {current} to "
                f"{migrate.head_revision()}",
                err=True,
            )
    return url


def refuse_a_schema_not_at_head(settings: Settings, url: str) -> None:
    """A long-running command on a DATABASE_URL whose schema is not at this agmem's head stops at
    its start (the embedded database was brought to head, or refused, by `open_database`). A
    newer agmem's schema: the worker of an image rolled back ran its statements against a schema
    it did not know, an error at every poll or rows written as that schema no longer means them.
    One behind (or never migrated; the worker does not migrate a DATABASE_URL): it started and
    logged `UndefinedColumn embed_claimed_until` at every poll, forever (ops16 review)."""
    if settings.database_url is None:
        return
    from app.db import migrate

    current, head = migrate.current_revision(url), migrate.head_revision()
    if current == head:
        return
    if current is not None and not migrate.is_known(current):
        raise migrate.MigrationFailed(migrate.newer_schema_problem(current))
    raise migrate.MigrationFailed(
        f"the database's schema is at {current or 'empty'}, behind head {head}: run `agmem migrate`"
    )


@contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM end a long-running command (`worker`, `sync --watch`) normally: the
    first sets `stop`, and what is under way finishes (the worker's jobs in hand, a sync's HNSW
    build). A second ends the command at once as an interrupted one (130 / 143): it raises in
    the event loop, whose tasks are then cancelled (a build cut short leaves an invalid index,
    which the next sync rebuilds). A second signal did nothing: the user waited for the build,
    or the worker's grace, with no way out but SIGKILL, which left the embedded server running.
    Entered in the event loop; once left, the command is over (`hand_over_signals`).
    """
    loop = asyncio.get_running_loop()

    def on_signal(signum: signal.Signals) -> None:
        signalled()  # a third, while the embedded server stops at exit, stops it at once
        if not stop.is_set():
            stop.set()
            return
        hand_over_signals(loop)
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        yield
    finally:
        hand_over_signals(loop)


def hand_over_signals(loop: asyncio.AbstractEventLoop) -> None:
    """Take Ctrl-C and SIGTERM from the event loop for `signal_while_exiting`, with no moment
    between where a signal has its default action. Removing its handlers, asyncio puts SIGTERM
    back to SIG_DFL and SIGINT to raising KeyboardInterrupt (as the loop closes, if not before):
    a second SIGTERM from there until the command's end killed `agmem worker` without its exit
    handlers (-15, the embedded server left running), and a second Ctrl-C once the command line
    had returned was a traceback (-2). Ours is installed first: from then on the loop's handler
    is never called (it runs only when the loop reads the signal from its wake-up fd, which it
    cannot do before this returns), and the loop forgets it without touching the signal."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal_while_exiting)
    # asyncio's own (unix_events), for lack of a way to remove a handler without SIG_DFL.
    handlers: dict[int, Any] | None = getattr(loop, "_signal_handlers", None)
    if not isinstance(handlers, dict):
        # Another loop (uvloop) or a future asyncio: its public removal, which puts the default
        # action back, then ours again at once: a window of two calls rather than a traceback.
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
            signal.signal(signum, signal_while_exiting)
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        handlers.pop(signum, None)
    if not handlers:
        signal.set_wakeup_fd(-1)  # as asyncio does once it handles no signal


async def check_reachable(engine: AsyncEngine) -> None:
    """One round trip before a long-running command says it has started: an unreachable database
    is then its one-line error and exit 1 (compose restarts it), not a loop that logs failures."""
    from sqlalchemy import text

    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))


# Terminal escapes (CSI, a terminated OSC, two-character ESC sequences) and other control
# characters. An indexed transcript keeps its tool output's colour codes, a fetched page or an
# agent's memory whatever it held: printed raw, a result could clear the screen, retitle the
# window, or, cut inside a colour, leave the terminal red. An OSC with no end is not taken as one:
# a lone U+009D turns up in mojibake (UTF-8 quotes read as latin-1), and removed to the end it hid
# the rest of the text; so is an ESC followed by anything but ASCII.
_CONTROLS = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI: colours, cursor moves, clearing
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]{0,2000}(?:\x07|\x1b\\|\x9c)"  # OSC: titles, links
    r"|\x1b[ -~]?|[\x00-\x08\x0e-\x1f\x7f-\x9f]"  # tabs and line breaks are left to the caller
)


def terminal_text(text: str) -> str:
    """`text` without terminal escapes or control characters other than tabs and line breaks."""
    return _CONTROLS.sub("", text)
