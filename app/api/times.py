"""API.md's one rule on times a client sends: none before 1970, none more than a day ahead.

It holds for every time in a request: capture's `timestamp` (epoch milliseconds) and the time
filters of the list and search routes (`GET /api/sessions?before=`, `POST /api/search`'s
`since`/`until`), so a filter of 1960 is the same 422 as an event of 1960, not an empty answer.
Capture's epoch milliseconds are held tighter (from 2000): that number alone carries no unit, so a
value in seconds would otherwise pass as a 1970 time. A filter is ISO 8601 or a number pydantic
reads as seconds or milliseconds by its size, so a 1990 filter means what it says.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, TypeAdapter, ValidationError

# A day of clock skew is tolerated; anything later is a client bug, not a plausible time.
MAX_FUTURE = timedelta(days=1)
MAX_FUTURE_MS = int(MAX_FUTURE.total_seconds() * 1000)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# No agent ran before 2000: an epoch-milliseconds value below it is a unit mistake, most often
# seconds (1764100000 as milliseconds is 21 January 1970), which used to be stored as a 1970 time.
MIN_EPOCH_MS = 946_684_800_000  # 2000-01-01T00:00:00Z


def _as_time(value_ms: float) -> str:
    try:
        return (EPOCH + timedelta(milliseconds=value_ms)).isoformat().replace("+00:00", "Z")
    except OverflowError:
        return "a time past year 9999" if value_ms > 0 else "a time before year 1"


def check_epoch_ms(value: int | None) -> int | None:
    """Epoch milliseconds from 2000 to one day from now, else a ValueError that reads the value."""
    if value is None:
        return None
    if value < MIN_EPOCH_MS:
        raise ValueError(
            f"timestamp must be epoch milliseconds: {value} ms is {_as_time(value)}, before"
            f" 2000-01-01 (as seconds it would be {_as_time(value * 1000)})"
        )
    if value > time.time() * 1000 + MAX_FUTURE_MS:
        raise ValueError(
            f"timestamp must be epoch milliseconds: {value} ms is {_as_time(value)}, more than"
            " a day in the future"
        )
    return value


def _refuse_bool(value: object) -> object:
    # pydantic reads JSON `true` as the integer 1; a flag is never a time.
    if isinstance(value, bool):
        raise ValueError("timestamp must be epoch milliseconds, not a boolean")
    return value


# Capture's `timestamp`: an integer of epoch milliseconds (a float or numeric string pydantic
# reads as an integer is accepted as before), never a boolean, from 2000 to a day ahead.
EpochMs = Annotated[int, BeforeValidator(_refuse_bool), AfterValidator(check_epoch_ms)]


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


# A time whose offset's `+` a URL's query turned into a space: `?before=…T10:00:00+05:00` sent
# unencoded arrives as `…T10:00:00 05:00`.
_PLUS_AS_SPACE = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d([.,]\d+)?)? \d\d(:?\d\d)?")


def _refuse_plus_as_space(value: object) -> object:
    # pydantic's own refusal said "unexpected extra characters at the end of the input", which
    # names neither the `+` nor the fix.
    if isinstance(value, str) and _PLUS_AS_SPACE.fullmatch(value.strip()):
        # Not only a URL's fault: a JSON body (`search`'s since) may hold the space itself.
        raise ValueError(
            f"{value!r} has a space where the offset's sign goes (a URL's query turns '+' into"
            " one; send %2B or Z)"
        )
    return value


# A request time (ISO 8601, or epoch seconds or milliseconds as pydantic reads them).
RequestTime = Annotated[
    datetime, BeforeValidator(_refuse_plus_as_space), AfterValidator(check_time)
]


# Digits past the microseconds a time is kept in: .NET's round-trip format writes 7.
_PAST_MICROSECONDS = re.compile(r"(\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d[.,]\d{6})(\d+)(.*)")
_DATETIME = TypeAdapter(datetime)


def _round_up_past_microseconds(value: object) -> object:
    """`…06.2970251Z` as `…06.297026Z`: pydantic drops the digits past the 6th, and a bound that
    excludes its time (`created_at < before`) then excluded the row at `…06.297025`, which is
    before it. Rounded up, the bound keeps every microsecond before the time sent."""
    value = _refuse_plus_as_space(value)
    if not isinstance(value, str):
        return value
    parts = _PAST_MICROSECONDS.fullmatch(value.strip())
    if parts is None or not parts.group(2).strip("0"):
        return value
    try:
        kept = _DATETIME.validate_python(parts.group(1) + parts.group(3))
    except ValidationError:
        return value  # pydantic's own refusal of the text as sent
    return kept + timedelta(microseconds=1)


# A request time that excludes itself (`GET /api/sessions?before=`): finer than a microsecond,
# it is rounded up to the next one.
ExclusiveRequestTime = Annotated[
    datetime, BeforeValidator(_round_up_past_microseconds), AfterValidator(check_time)
]
