"""JSON whose numbers keep their exact value, for rewriting stored jsonb.

Postgres keeps a jsonb number exactly (a `numeric`): an integer of 5,000 digits, `1e400` (written
as 1 and 400 zeros), `1e-400`, a decimal of 1,000 digits, `1.50` with its scale. Python's `json`
refuses an integer of more than 4,300 digits (its int-from-string limit) and makes a float of
every other number: parsed and dumped again, `1.50` became `1.5`, `1e-400` became `0.0` and a long
decimal lost its digits. Here every non-integer number, and an integer too long for `int`, is a
`Decimal` (exact, any length), dumped as its `str`: the same numeric, scale included, for Postgres
(`1E-400` is its `0.000…1`; its own text has no exponents). The price: a float parsed as a
`Decimal` costs more than as a `float` (100,000 floats: 50-59 against 31-49 ms of CPU, 27 Nov);
the service's stored values and transcripts hold few floats.
"""

from __future__ import annotations

import json
import math
import secrets
import sys
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from functools import lru_cache
from typing import Any


def loads(data: str | bytes) -> Any:
    """`json.loads`, each number kept exactly (see the module's docstring). Raises ValueError
    for text that is not JSON, RecursionError for nesting past Python's limit."""
    try:
        # Integers by the C parser's own path, as `int`, unless one is too long for it.
        return json.loads(data, parse_float=Decimal, parse_constant=Decimal)
    except ValueError as error:
        if not _too_long(error):
            raise
    return json.loads(data, parse_float=Decimal, parse_int=_int, parse_constant=Decimal)


def raw_decode(text: str, position: int = 0) -> tuple[Any, int]:
    """`json.JSONDecoder().raw_decode`, each number kept exactly as `loads` keeps it."""
    try:
        return _EXACT.raw_decode(text, position)
    except ValueError as error:
        if not _too_long(error):
            raise
    return _EXACT_WIDE.raw_decode(text, position)


def _too_long(error: ValueError) -> bool:
    # Python's message for an integer past `sys.get_int_max_str_digits()`: not a JSON error.
    return "integer string conversion" in str(error)


def _int(text: str) -> int | Decimal:
    try:
        return int(text)
    except ValueError:  # more digits than `sys.get_int_max_str_digits()`
        return Decimal(text)


# `NaN` and `Infinity` (Python's, not JSON's) as Decimals too: dumped back the same, and no float
# of theirs meets the checks of values written (`check_numbers`, `privacy.sanitize_json`).
_EXACT = json.JSONDecoder(parse_float=Decimal, parse_constant=Decimal)
_EXACT_WIDE = json.JSONDecoder(parse_float=Decimal, parse_int=_int, parse_constant=Decimal)


def _wide_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        # Through Decimal: its conversion to int is not the string one Python limits (a value
        # of 5,000 digits read in 0.8 ms; jsonb's longest integer, 131,072 digits, in 1.2 s).
        return int(Decimal(text))


class JsonText(str):
    """A stored jsonb value as its exact JSON text (Postgres's), for one that Python's `json`
    cannot read back as it is: nested past its parser (RecursionError: every read of the row
    was a 500) or holding a number no double holds (`1e400` + 0.5 was read as inf, given back as
    null over HTTP and `Infinity` by `agmem memory get`; `1e-16383` as 0.0). Readers give it as a
    string, flagged `valueIsJsonText` (app/memories/schemas.py, app/mcp/server.py). Never
    written back as such: a client sending the text back with the flag has it parsed again
    (`parse_written_text`), and copies between tables are made in SQL."""

    __slots__ = ()


def flag_json_text(answer: dict[str, Any], *fields: str, long_ints: bool = False) -> dict[str, Any]:
    """`answer` (changed in place), with `<field>IsJsonText: true` beside each of its `fields`
    given as its exact JSON text (a `JsonText`): a client could not tell it from a string value
    otherwise. With `long_ints`, for an answer Python's `json` writes (MCP's SDK), a field
    holding an integer too long for it (`has_long_int`) is given as its text too, so flagged.
    The one maker of these flags: capture's answers, memories and their versions, MCP's tools."""
    for name in fields:
        value = answer[name]
        if long_ints and not isinstance(value, JsonText) and has_long_int(value):
            value = answer[name] = JsonText(dumps(value, ensure_ascii=False, separators=(",", ":")))
        if isinstance(value, JsonText):
            answer[f"{name}IsJsonText"] = True
    return answer


# What an internal reader (the worker's extract, its prompt, a summary) keeps of a `JsonText`.
OPAQUE_TEXT_MAX = 1000


def opaque(value: Any, limit: int = OPAQUE_TEXT_MAX) -> Any:
    """`value`, but a `JsonText` as plain text cut to `limit` characters (and a note of its
    length), for a reader that only shows it: `1e-16000`'s 16 KB of digits went whole into an
    extract and a summary. A reader that walks a value's structure must not take a `JsonText`
    for one (it is a string)."""
    if not isinstance(value, JsonText) or len(value) <= limit:
        return str(value) if isinstance(value, JsonText) else value
    return f"{value[:limit]}… ({len(value)} characters of JSON)"


class _NoDouble(Exception):
    """A stored number no double holds (see `_double`)."""


# The check runs on every float of every read: a nonzero finite one (most) passes one chained
# comparison, with no call (`math.isinf` first: 64 KB with 600 floats read in ~1,144 against
# ~1,104-1,116 µs so, json's ~955; bench/exactjson_loads.py on a loaded machine).
_LARGEST = sys.float_info.max


def _double(text: str) -> float:
    number = float(text)
    if 0.0 < number <= _LARGEST or -_LARGEST <= number < 0.0:
        return number
    if number == 0.0 and not text.lower().partition("e")[0].strip("+-0."):
        return number  # a zero, as written
    raise _NoDouble  # infinite, or a nonzero number read as 0.0


def loads_stored(data: str | bytes) -> Any:
    """`json.loads` for a value read back from Postgres: what the service gives clients as JSON
    numbers stays `int` and `float`, and an integer of more than 4,300 digits (which a row
    written by SQL or an older build can hold) is read as the exact `int` instead of raising
    (every read of such a memory was a 500). `dumps` writes it back. A value nested past the
    parser, or holding a number no double holds, is its `JsonText`."""
    text = data if isinstance(data, str) else data.decode()  # jsonb's text is UTF-8
    try:
        try:
            return _STORED.decode(text)
        except ValueError as error:
            if not _too_long(error):
                raise
        return _STORED_WIDE.decode(text)
    except (RecursionError, _NoDouble):
        return JsonText(text)


# Built once: `json.loads` with any option builds a decoder a call, which doubled every read's
# cost (a small dict 3.6 against 1.6 µs so; bench/exactjson_loads.py, docs/benchmarks.md).
_STORED = json.JSONDecoder(parse_float=_double)
_STORED_WIDE = json.JSONDecoder(parse_int=_wide_int, parse_float=_double)


def dumps(value: Any, **options: Any) -> str:
    """`json.dumps(value, **options)` that also writes the `Decimal`s `loads` made, as their
    `str` (which is JSON; a NaN or infinity as `json` writes a float one, and refused as it is
    with `allow_nan=False`), and an `int` too long for Python's int-to-string conversion (one
    `loads_stored` read), as its digits. Raises TypeError for what `json` cannot write.
    `options` are `json.dumps`'s but `default` and `cls`, each hashable (a tuple of separators,
    not a list): each set of them is the key of its own encoder, kept."""
    encoder = _encoder(tuple(sorted(options.items())))
    numbers: list[str] = []
    # Saved and put back: a `dumps` the encoder reaches (a Decimal subclass's `__str__`) has its
    # own numbers, and the outer call's must not be replaced; none kept once the call is done.
    outer = _marks.append, _marks.allow_nan
    _marks.append, _marks.allow_nan = numbers.append, options.get("allow_nan", True)
    try:
        text = encoder.encode(value)
    except ValueError as error:
        if not _too_long(error):
            raise
        numbers.clear()
        text = encoder.encode(_long_ints_as_decimals(value))
    finally:
        _marks.append, _marks.allow_nan = outer
    if not numbers:
        return text
    pieces = text.split(_MARK_WRITTEN)
    joined = [""] * (2 * len(pieces) - 1)
    joined[::2] = pieces
    joined[1::2] = numbers
    return "".join(joined)


# `json` cannot write raw text and its C encoder is kept: each Decimal is first written as this
# string, and the text is then cut at those and the numbers' texts put in, in the order the
# encoder wrote them. Random per process and never written out (every mark is replaced), so no
# client can send it; besides, jsonb holds no NUL.
_NONCE = secrets.token_hex(8)
_MARK = f"\0{_NONCE}\0"
_MARK_WRITTEN = f'"\\u0000{_NONCE}\\u0000"'


class _Marks(threading.local):
    """The numbers of the `dumps` running in this thread, in the order its encoder met them."""

    append: Callable[[str], None] | None = None
    allow_nan: bool = True


_marks = _Marks()


def _placeholder(item: Any) -> str:
    if not isinstance(item, Decimal):
        raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")
    append = _marks.append
    assert append is not None  # set by the `dumps` whose encoder calls this
    append(str(item) if item.is_finite() else _not_finite(item, _marks.allow_nan))
    return _MARK


@lru_cache(maxsize=32)
def _encoder(options: tuple[tuple[str, Any], ...]) -> json.JSONEncoder:
    # Built once per set of options: `json.dumps` builds one a call unless given none, and with
    # a nonce and a closure a call a small dict cost 5.0-5.6 µs against `json.dumps`'s 2.7-3.0
    # (3.4-3.8 so; bench/exactjson_dumps.py, docs/benchmarks.md).
    return json.JSONEncoder(default=_placeholder, **dict(options))


def _not_finite(number: Decimal, allow_nan: bool) -> str:
    if not allow_nan:
        raise ValueError(f"Out of range float values are not JSON compliant: {number!r}")
    # `json`'s words for a float's (`str` wrote `sNaN`, which no JSON reader takes).
    if number.is_nan():
        return "NaN"
    return "-Infinity" if number.is_signed() else "Infinity"


def has_long_int(value: Any) -> bool:
    """Whether `value` holds an `int` too long for Python's int-to-string conversion (one
    `loads_stored` read): `json.dumps` of it raises, where `dumps` writes it."""
    return any(isinstance(item, int) and _too_long_int(item) for item in _scalars(value))


def has_float(value: Any) -> bool:
    """Whether `value` holds a `float` (one a parser other than `loads` made, perhaps of a
    number no double holds as written: `1e-400`, `1.50`)."""
    return any(isinstance(item, float) for item in _scalars(value))


def _too_long_int(number: int) -> bool:
    """Whether `str(number)` raises: more digits than `sys.get_int_max_str_digits()` (a sign
    not counted; 0 is no limit), as Python counts them."""
    limit = sys.get_int_max_str_digits()
    return limit > 0 and number.bit_length() > _bits_within(limit) and abs(number) >= _ten_to(limit)


@lru_cache(maxsize=4)
def _bits_within(digits: int) -> int:
    # No int of this many bits has more than `digits` digits: 2**bits <= 10**digits.
    return digits * 3321928 // 1000000


@lru_cache(maxsize=4)
def _ten_to(digits: int) -> int:
    power: int = 10**digits  # `int ** int` is typed Any: a negative power would be a float
    return power


def _scalars(value: Any) -> Iterator[Any]:
    """Every value in `value` that is no dict or list, at any depth, without recursion (a value
    nested past Python's recursion limit is walked too)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            yield item


def _long_ints_as_decimals(value: Any) -> Any:
    # Decimal(int) converts without the limited string path, and writes every digit.
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value) if _too_long_int(value) else value
    if isinstance(value, dict):
        return {key: _long_ints_as_decimals(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_long_ints_as_decimals(item) for item in value]
    return value


class UnkeptJson(ValueError):
    """A written value the service cannot keep as the JSON it is: answered as InvalidJSON (400)
    on every surface, not as a field's ValidationFailed."""


class NumberOutOfRange(UnkeptJson):
    """A number a write cannot keep (see `check_numbers`)."""


class BadJsonText(UnkeptJson):
    """A value written as its JSON text (`valueIsJsonText`) that is no JSON a write keeps."""


def same_value(stored: Any, sent: Any) -> bool:
    """Whether a value read back from Postgres (`loads_stored`: floats, or a `JsonText`) is the
    value `sent` (as written: `Decimal`s of `loads` perhaps), number for number: `0.1` read as
    a float is no `Decimal("0.1")` to `==`, and `1e-400` is read as its text. Only a value `==`
    does not find equal pays for a second look (both sides parsed again with `loads`)."""
    if stored == sent:
        return True
    exact = loads(stored) if isinstance(stored, JsonText) else loads(dumps(stored))
    try:
        return bool(exact == loads(dumps(sent)))
    except (TypeError, ValueError):
        return False


class TextTooDeep(ValueError):
    """JSON text nested past Python's parser: a value too deep for any write, the fault a value
    sent as itself has (not InvalidJSON: the body is JSON; see `parse_written_text`)."""


def parse_written_text(text: Any) -> Any:
    """The value a write sent as its exact JSON text (`valueIsJsonText: true`, as every read
    answers a `JsonText`), parsed with `loads`: numbers exact, `1e-400` kept (through pydantic
    it was 0.0). Raises BadJsonText for what is no string or no JSON, saying which, and
    TextTooDeep for text nested past the parser. How deep a write's value may nest is the
    write's check, the same for a value sent as itself: one fault, one answer (a value of 900
    levels was 422 ValidationFailed sent as itself, 400 InvalidJSON as its text)."""
    if not isinstance(text, str):
        raise BadJsonText(
            "valueIsJsonText says value is its JSON text, so value must be a string, not "
            f"{type(text).__name__}"
        )
    try:
        value = loads(text)
    except RecursionError:
        raise TextTooDeep("value (JSON text) is nested past the parser") from None
    except ValueError as error:
        reason = (
            f"has an integer of more than {sys.get_int_max_str_digits()} digits"
            if _too_long(error)
            else f"is not JSON: {error}"
        )
        raise BadJsonText(f"value (JSON text) {reason}") from None
    return value


# Past a double, every reader of the value (HTTP, MCP, `agmem memory get`) gave back null or
# `Infinity`; Python's `json` and pydantic read such a number (`1e400`) as inf.
_DOUBLE_MAX = Decimal(sys.float_info.max)
# What Postgres's numeric holds: 131,072 digits before the point, 16,383 after it.
NUMERIC_DIGITS_MAX = 131072
NUMERIC_SCALE_MAX = 16383

PAST_A_DOUBLE = (
    "a number is NaN, Infinity or past a double's ±1.8e308 (such as 1e400), which JSON has not "
    "or this service cannot give back; send it as a string"
)


def check_numbers(value: Any) -> Any:
    """`value`, unless it holds a number a write cannot keep: NaN or Infinity (which Python's
    parser takes, but JSON has not), a number past a double's range (pydantic and `json` read
    `1e400` as inf; `loads` as a Decimal, which Postgres stored and every read gave back as
    Infinity or null), or one with more digits after the point than Postgres's numeric holds
    (`1e-999999`, which it refused). Raises NumberOutOfRange saying which."""
    for item in _scalars(value):
        if isinstance(item, float):
            if not math.isfinite(item):
                raise NumberOutOfRange(PAST_A_DOUBLE)
        elif isinstance(item, Decimal):
            check_decimal(item)
    return value


def check_decimal(number: Decimal) -> None:
    """Raise NumberOutOfRange for a number `check_numbers` refuses (a `Decimal` of `loads`)."""
    if not number.is_finite():
        raise NumberOutOfRange(PAST_A_DOUBLE)
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # a finite Decimal's
    if exponent == 0:
        # An integer too long for `int` (`loads`'s `_int`): read back exactly (`loads_stored`).
        if len(digits) > NUMERIC_DIGITS_MAX:
            raise NumberOutOfRange(
                f"a number is an integer of {len(digits)} digits, and the database keeps at "
                f"most {NUMERIC_DIGITS_MAX}; send it as a string"
            )
        return
    # `copy_abs`, not `abs`: the context's rounding trapped 1e999999999 (decimal.Overflow).
    if number.copy_abs() > _DOUBLE_MAX:
        raise NumberOutOfRange(PAST_A_DOUBLE)
    if -exponent > NUMERIC_SCALE_MAX:
        raise NumberOutOfRange(
            f"a number is written with {-exponent} digits after the point, and the database "
            f"keeps at most {NUMERIC_SCALE_MAX}; send it as a string"
        )
