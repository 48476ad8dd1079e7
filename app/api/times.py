"""API.md's one rule on times a client sends: none before 1970, none more than a day ahead.

It holds for every time in a request: capture's `timestamp` (epoch milliseconds) and the time
filters of the list and search routes (`GET /api/sessions?before=`, `POST /api/search`'s
`since`/`until`), so a filter of 1960 is the same 422 as an event of 1960, not an empty answer.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator

# A day of clock skew is tolerated; anything later is a client bug, not a plausible time.
MAX_FUTURE = timedelta(days=1)
MAX_FUTURE_MS = int(MAX_FUTURE.total_seconds() * 1000)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_epoch_ms(value: int | None) -> int | None:
    """Epoch milliseconds between 1970 and one day from now, else a ValueError."""
    if value is None:
        return None
    if value < 0:
        raise ValueError("timestamp is before 1970 (epoch milliseconds must not be negative)")
    if value > time.time() * 1000 + MAX_FUTURE_MS:
        raise ValueError("timestamp is more than a day in the future (expected epoch milliseconds)")
    return value


def check_time(value: datetime | None) -> datetime | None:
    """A time between 1970 and one day from now, in UTC (a time without an offset is UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    # Compared before converting: year 9999 at -05:00 has no UTC datetime (an OverflowError).
    if value < EPOCH:
        raise ValueError("time is before 1970")
    if value > datetime.now(UTC) + MAX_FUTURE:
        raise ValueError("time is more than a day in the future")
    return value.astimezone(UTC)


# A request time (ISO 8601, or epoch seconds or milliseconds as pydantic reads them).
RequestTime = Annotated[datetime, AfterValidator(check_time)]
