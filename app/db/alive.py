"""Whether a pooled connection still has its backend, told without a round trip.

Used by every pool before a connection is handed out: the raw psycopg pools (capture writes,
memory reads), a sync watch's kept connection, and the SQLAlchemy engine's checkout."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection, pq


def usable(connection: AsyncConnection[Any]) -> bool:
    """Whether an idle connection still has its backend, without a round trip.

    A backend that went away (`pg_terminate_backend`, the OOM killer taking one backend, which
    makes Postgres restart them all, a restarted server) sent its FATAL and closed the socket
    long before the connection's next use. Reading what arrived meanwhile lets libpq see the end
    of the stream and mark the connection broken: two non-blocking recvs (of nothing, on a live
    connection), as the first one returns the FATAL message, which libpq takes for a notice,
    and only the second the end of the stream. Nothing is sent, so the caller can take another
    connection for work it has not sent anywhere yet; the pool replaces a broken connection
    given back to it."""
    pgconn = connection.pgconn
    try:
        pgconn.consume_input()
        pgconn.consume_input()
    except psycopg.OperationalError:  # the end of the stream: libpq marked it broken
        return False
    return pgconn.status == pq.ConnStatus.OK
