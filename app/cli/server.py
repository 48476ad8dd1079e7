"""`agmem serve`, `agmem migrate` and `agmem status`."""

from __future__ import annotations

import asyncio
import datetime
import errno
import socket
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli.common import (
    check_provider,
    cli_errors,
    describe_location,
    fail,
    open_database,
    settings_or_exit,
)
from app.config import Settings, bare_host
from app.entry import signalled
from app.heap import freeze_heap

if TYPE_CHECKING:
    from rich.console import Console
    from sqlalchemy.engine import Engine


def bind_listener(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound before anything slow runs: a port in use is refused
    at once, and port 0 becomes a free port the OS picks, known before the banner is printed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRINUSE:
            fail(f"port {port} on {host} is in use; set AGMEM_PORT or stop its owner")
        fail(f"cannot bind {host}:{port}: {error.strerror}")
    return listener


def url_host(host: str) -> str:
    """The host as a URL writes it: an IPv6 address in brackets (`http://[::1]:37777`)."""
    return f"[{host}]" if ":" in host else host


# Descriptors kept for what is not a client's connection: the database pools, the embedded
# Postgres's files and sockets, the worker's and a sync's files, the listener, the logs.
FD_RESERVE = 128  # more than app.cli.wire.OVERFLOW
FD_SOFT_LIMIT_WANTED = 65_536


def connection_limit(wanted: int) -> int:
    """The connections `agmem serve` takes at once: `wanted` (AGMEM_MAX_CONNECTIONS), within
    what the process's file descriptors leave after `FD_RESERVE`.

    The soft descriptor limit is raised first, up to the hard one (as Go's runtime does): a
    macOS shell gives 256, which left 128 connections."""
    try:
        import resource
    except ImportError:  # not on POSIX: no limit to read
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = FD_SOFT_LIMIT_WANTED
    if hard != resource.RLIM_INFINITY:
        target = min(hard, target)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # macOS refuses more than its kern.maxfilesperproc
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_RESERVE))


def check_token_rule(settings: Settings) -> None:
    if not settings.binds_loopback_only and not settings.api_token:
        fail(
            f"refusing to listen on {settings.host} without a token: set AGMEM_API_TOKEN, "
            "or bind 127.0.0.1",
            2,
        )


def _address(host: str | None) -> str | None:
    """--host as AGMEM_HOST is read: brackets dropped, and empty refused (uvicorn binds every
    interface for an empty host; the token rule refused it, naming an address of nothing)."""
    if host is None:
        return None
    if not bare_host(host):
        raise typer.BadParameter("is empty: set the address to bind, e.g. 127.0.0.1")
    return bare_host(host)


def serve(
    host: Annotated[
        str | None, typer.Option(help="Address to bind (AGMEM_HOST).", callback=_address)
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Port to listen on (AGMEM_PORT); 0 picks a free one."),
    ] = None,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="Do not run a worker in this process.")
    ] = False,
) -> None:
    """Start the HTTP API (embedded PostgreSQL when DATABASE_URL is unset), after migrating."""
    settings = settings_or_exit()
    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    if overrides:
        settings = settings.model_copy(update=overrides)
    check_token_rule(settings)
    check_provider(settings)
    listener = bind_listener(settings.host, settings.port)
    bound_port: int = listener.getsockname()[1]
    # Loaded once the checks above have passed: a refusal costs no import of the app.
    import uvicorn

    from app.cli.serving import StoppingServer
    from app.cli.wire import JsonErrorsProtocol
    from app.db.revision import at_head
    from app.main import create_app

    with cli_errors():
        url = open_database(settings, migrate_embedded=False)
        # Alembic is loaded only for a database not at head: one cheap query first.
        if not at_head(url):
            from app.db import migrate

            migrate.upgrade(url)
        typer.echo(f"agmem: database {describe_location(settings, url)}, schema at head", err=True)
        typer.echo(f"agmem: serving on http://{url_host(settings.host)}:{bound_port}", err=True)
        hurry = asyncio.Event()
        app = create_app(
            settings,
            database_url=url,
            run_worker=not no_worker,
            embedded=settings.database_url is None,
            hurry=hurry,
            warm_routes=True,
        )
        # What startup built (modules, the app, its schemas) lives as long as the process.
        freeze_heap()
        config = uvicorn.Config(
            app,
            host=settings.host,
            port=bound_port,
            log_level=settings.log_level,
            access_log=False,
            # Its refusals in the error shape, and a bound on a stalled client (app/cli/wire.py).
            http=JsonErrorsProtocol.configured(
                idle_timeout=settings.request_idle_timeout_seconds,
                trusted_proxies=settings.trusted_proxies,
                allowed_hosts=settings.allowed_hosts,
                refusal_log_seconds=settings.refusal_log_seconds,
                max_body_bytes=settings.max_body_bytes,
                linger_quiet_seconds=settings.linger_quiet_seconds,
            ),
            # The service serves no WebSocket: the protocol ignores an `Upgrade` and the route
            # answers, in the error shape (uvicorn's WebSocket protocol answered in plain text).
            ws="none",
            # Answered in the error shape by the protocol, which checks it first.
            # (uvicorn refuses at `limit_concurrency` connections, this one included).
            limit_concurrency=connection_limit(settings.max_connections) + 1,
        )
        server = StoppingServer(config, hurry=hurry.set)
        try:
            server.run(sockets=[listener])
        except KeyboardInterrupt:  # a signal before uvicorn handles them, or after
            signalled()  # one more while the embedded server stops at exit stops it at once
        if not server.started:
            fail("the server did not start; see the log above")
        server.raise_if_forced()


def migrate_command(
    revision: Annotated[
        str | None, typer.Argument(help="Target revision (default: head; required with --down).")
    ] = None,
    down: Annotated[
        bool,
        typer.Option("--down", help="Downgrade to REVISION instead (`base` drops every table)."),
    ] = False,
) -> None:
    """Bring the schema to a revision (default: head) with Alembic."""
    if down and revision is None:
        # A bare --down went to base: every table dropped, all memory gone, by a command whose
        # help promised "REVISION [default: head]". Losing everything takes saying so.
        fail("--down needs the revision to go down to, e.g. `agmem migrate --down base`", 2)
    target = revision or "head"
    settings = settings_or_exit()
    from app.db import migrate

    with cli_errors():
        url = open_database(settings, migrate_embedded=False)
        if down:
            migrate.downgrade(url, target)
        else:
            migrate.upgrade(url, target)
        typer.echo(f"schema at {migrate.current_revision(url) or 'base (empty)'}")


def status() -> None:
    """Show the database location, schema revision, row counts and embedding provider."""
    settings = settings_or_exit()
    from rich.console import Console
    from rich.table import Table
    from sqlalchemy import text

    from app.db import migrate
    from app.db.engine import make_sync_engine
    from app.db.models import Base
    from app.llm.embeddings import describe_embedding
    from app.worker.metrics import CHUNKS_BY_MODEL_SQL

    # Plain text: a path may hold "[x]", which rich markup would eat, or ":fire:", which its emoji
    # codes made 🔥; and no wrapping at 80 columns.
    console = Console(markup=False, highlight=False, emoji=False, soft_wrap=True)
    with cli_errors():
        url = open_database(settings, upgrade_existing=False)
        current, head = migrate.current_revision(url), migrate.head_revision()
        console.print(f"database   {describe_location(settings, url)}")
        if current == head:
            state = "at head"
        elif migrate.unknown_revision(url) is not None:
            state = migrate.newer_schema_problem(str(current))
        else:
            state = f"behind head {head}: run `agmem migrate`"
        console.print(f"schema     {current or 'empty'} ({state})")
        embedding = describe_embedding(settings)
        console.print(
            f"embedding  {embedding['provider']}: {embedding['model']} ({embedding['dims']} dims)"
        )
        table = Table("table", "rows", box=None)
        engine = make_sync_engine(url)
        chunks: list[Any] = []
        try:
            with engine.connect() as connection:
                for name in sorted(Base.metadata.tables):
                    # Behind head (or a newer agmem's), a table may not be there yet.
                    if current is None or (current != head and not table_exists(connection, name)):
                        table.add_row(name, "missing")
                        continue
                    if name == "memory_chunks":  # its count and its vectors in one pass
                        chunks = list(connection.execute(CHUNKS_BY_MODEL_SQL).all())
                        count = sum(int(row.n) for row in chunks)
                    else:
                        sql = text(f'SELECT count(*) FROM "{name}"')
                        count = connection.execute(sql).scalar_one()
                    table.add_row(name, str(count))
            rescan = describe_rescan(engine) if current == head else None
        finally:
            engine.dispose()
        console.print(table)
        if rescan is not None:
            console.print(f"redaction  {rescan}")
        # Their queries name this agmem's columns, which a schema not at head may not have.
        if current == head:
            print_worker_metrics(console, settings, engine_url=url, chunks=chunks)
        elif current is not None:
            console.print("worker     not read: the schema is not at this agmem's head")


def table_exists(connection: Any, table: str) -> bool:
    from sqlalchemy import text

    found = connection.execute(text("SELECT to_regclass(:name)"), {"name": table}).scalar()
    return found is not None


def describe_rescan(engine: Engine) -> str | None:
    """Whether the stored rows await the redaction pass of a rules upgrade (app/worker/rescan.py),
    None before migration 0005."""
    from sqlalchemy import text

    from app.worker.rescan import STATE_SQL, rescan_state

    with engine.connect() as connection:
        if not connection.execute(text("SELECT to_regclass('redaction_state')")).scalar():
            return None
        state = rescan_state(connection.execute(STATE_SQL).first())
    return "no state row: `agmem redact` redacts what is stored" if state is None else state.line()


def print_worker_metrics(
    console: Console, settings: Settings, *, engine_url: str, chunks: list[Any]
) -> None:
    """The worker's backlog and results, as /health reports them, how the observations were
    compressed, the index rows' vectors by model (`chunks`, CHUNKS_BY_MODEL_SQL's rows) and
    what Gemini spent today."""
    from app.db.engine import make_sync_engine
    from app.llm.embeddings import describe_embedding, model_identity
    from app.llm.ratelimit import USAGE_TODAY_SQL
    from app.worker.metrics import (
        COMPRESSED_BY_SQL,
        LAST_GEMINI_FAILURE_SQL,
        METRICS_SQL,
        TOKENS_BY_PROJECT_SQL,
        describe_compressed_by,
        describe_vectors,
        shape_metrics,
    )

    engine = make_sync_engine(engine_url)
    try:
        with engine.connect() as connection:
            counts = connection.execute(METRICS_SQL).one()
            by_project = connection.execute(TOKENS_BY_PROJECT_SQL).all()
            compressed_by = connection.execute(COMPRESSED_BY_SQL).all()
            failure = connection.execute(LAST_GEMINI_FAILURE_SQL).one_or_none()
            today = connection.execute(USAGE_TODAY_SQL).one()
    finally:
        engine.dispose()
    metrics = shape_metrics(counts, by_project)
    oldest = metrics["oldestPendingSeconds"]
    console.print(
        f"worker     pending {metrics['pending']}, in flight {metrics['inFlight']}, "
        f"failed {metrics['failed']}, compressed {metrics['compressed']}, "
        f"summarized {metrics['summarized']}, awaiting result {metrics['awaitingResult']}, "
        f"without result {metrics['withoutResult']}, oldest pending "
        f"{'-' if oldest is None else f'{oldest:.0f} s'}"
    )
    # After a model switch, the rows not yet re-embedded: out of the vector branch, and no other
    # count said so (embedPending is rows without any vector).
    embedding = describe_embedding(settings)
    current = model_identity(
        str(embedding["provider"]), str(embedding["model"]), int(embedding["dims"])
    )
    if settings.embedding_provider == "sentence-transformers" and not settings.embedding_dims:
        current = current.rsplit(":", 1)[0] + ":"  # its width is the model's, not loaded here
    vectors = [row for row in chunks if row.embedded]
    console.print(f"vectors    {describe_vectors(vectors, current)}")
    if compressed_by:
        console.print(f"compressed {describe_compressed_by(compressed_by)}")
    if failure is not None:
        # Why the fallback took over (a wrong key, a model name Gemini does not know), which the
        # counts above do not say; its first line, as the worker's log has it.
        at = failure.compressed_at
        when = f" {at.astimezone(datetime.UTC):%Y-%m-%d %H:%M} UTC" if at else ""
        error = (failure.last_error.strip().splitlines() or [""])[0]
        console.print(f"           last failure{when}: {error}")
    console.print(f"gemini     {describe_gemini(settings, today.tokens, today.calls)}")
    console.print(f"tokens     saved {metrics['tokensSaved']} in total")
    for project, saved in metrics["tokensSavedByProject"].items():
        console.print(f"           {saved} in {project}")


def describe_gemini(settings: Settings, tokens: int, calls: int) -> str:
    """Whether this configuration calls Gemini, where, and today's spend against the budget."""
    if not settings.gemini_api_key:
        return "off (no GEMINI_API_KEY): the extractive fallback compresses"
    where = settings.gemini_base_url or "Google"
    budget = settings.gemini_daily_token_budget
    of = f" of {budget:,}" if budget else " (no daily budget)"
    return f"{settings.gemini_model} at {where}: {tokens:,}{of} tokens today in {calls:,} calls"


def register(cli: typer.Typer) -> None:
    cli.command()(serve)
    cli.command("migrate")(migrate_command)
    cli.command()(status)
