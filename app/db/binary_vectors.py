"""pgvector's binary wire format on the psycopg connection under a SQLAlchemy session.

Vectors sent as text cost a float-to-decimal formatting per component in Python and a parse in
Postgres (~1 ms a 256-dim vector in Python under load); the binary form is the float32 bytes.
"""

from __future__ import annotations

from typing import Any, cast

import psycopg
from pgvector.psycopg.vector import register_vector_info
from psycopg.types import TypeInfo
from sqlalchemy.ext.asyncio import AsyncSession

# What can carry binary vectors: an ORM session, or a psycopg connection used directly.
VectorSession = AsyncSession | psycopg.AsyncConnection[Any]


async def binary_vector_connection(session: VectorSession) -> psycopg.AsyncConnection[Any]:
    """The session's psycopg connection (or the psycopg connection given), able to send and read
    numpy vectors in binary."""
    if isinstance(session, psycopg.AsyncConnection):
        driver = session
    else:
        raw = await (await session.connection()).get_raw_connection()
        driver = cast("psycopg.AsyncConnection[Any]", raw.driver_connection)
    # Adapters live on the connection, and the pool reuses connections: register once each
    # (only `vector`: pgvector's register_vector_async also looks up bit, halfvec, sparsevec).
    if driver.adapters.types.get("vector") is None:
        register_vector_info(driver, await TypeInfo.fetch(driver, "vector"))
    return driver


# The vector type's oids, for a caller that sends this query along with others; TypeInfo.fetch
# costs three round trips on an autocommit connection (its query inside BEGIN ... COMMIT).
VECTOR_TYPE = "SELECT oid, typarray FROM pg_type WHERE oid = to_regtype('vector')"


def use_vector_type(
    connection: psycopg.AsyncConnection[Any], found: tuple[int, int] | TypeInfo | None
) -> None:
    """Register the vector type on `connection` from `VECTOR_TYPE`'s row, or from the TypeInfo
    another connection to the same database registered."""
    if isinstance(found, tuple):
        found = TypeInfo("vector", *found)
    register_vector_info(connection, found)
