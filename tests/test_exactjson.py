"""app/exactjson.py: numbers Python's `json` cannot round-trip, parsed and dumped exactly."""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal

import pytest

from app import exactjson


def test_numbers_json_loses_or_refuses_come_back_with_their_value_and_scale() -> None:
    text = (
        '{"big": ' + "9" * 5000 + ', "huge": 1e400, "tiny": 1e-400, "minus": -1E+400, '
        '"scale": 1.50, "zero": -0.0, "long": 3.' + "14" * 500 + ', "plain": 42, "f": 0.1}'
    )
    with pytest.raises(ValueError, match="integer string conversion"):
        json.loads(text)
    value = exactjson.loads(text)
    assert value["big"] == Decimal("9" * 5000)
    assert value["plain"] == 42
    assert isinstance(value["plain"], int)
    back = json.loads(exactjson.dumps(value), parse_float=Decimal, parse_int=Decimal)
    expected = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    assert back == expected
    # The scale too, which Decimal's equality does not compare.
    assert [str(back[key]) for key in back] == [str(expected[key]) for key in expected]


def test_a_string_like_a_placeholder_stays_a_string() -> None:
    value = exactjson.loads('{"a": 1.5, "b": [2.25]}')
    value["s"] = "\u0000abc:0\u0000"
    value["t"] = "\\u0000x:0\\u0000"
    assert json.loads(exactjson.dumps(value)) == {
        "a": 1.5,
        "b": [2.25],
        "s": "\u0000abc:0\u0000",
        "t": "\\u0000x:0\\u0000",
    }


def test_text_that_is_not_json_is_still_a_value_error() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        exactjson.loads("{1e400")
    with pytest.raises(ValueError, match="Expecting"):
        exactjson.loads("[" + "9" * 5000 + ",")
    with pytest.raises(TypeError):
        exactjson.dumps({"x": object()})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1e400", "past a double"),
        ('[1, {"a": -1.5e308888}]', "past a double"),
        ("NaN", "NaN"),
        ("1e-16384", "16384 digits after the point"),
        ("9" * 131073, "an integer of 131073 digits"),
    ],
)
def test_check_numbers_refuses_what_a_write_cannot_keep(text: str, reason: str) -> None:
    with pytest.raises(exactjson.NumberOutOfRange, match=reason):
        exactjson.check_numbers(exactjson.loads(text))


@pytest.mark.parametrize("text", ["1e400", "[-1e309]", '{"a": NaN}', "Infinity"])
def test_check_numbers_refuses_the_floats_json_reads_past_a_double(text: str) -> None:
    # pydantic and `json` read 1e400 as inf: no value it could have is kept.
    with pytest.raises(exactjson.NumberOutOfRange, match="send it as a string"):
        exactjson.check_numbers(json.loads(text))


def test_check_numbers_keeps_what_postgres_and_the_readers_keep() -> None:
    text = "[1.50, 1e-16383, -0, 1.7976931348623157e308, " + "9" * 131072 + ', {"a": [0.1]}]'
    value = exactjson.loads(text)
    assert exactjson.check_numbers(value) is value


def test_loads_stored_gives_what_it_cannot_read_as_it_is_as_its_text() -> None:
    deep = "[" * 3000 + "1" + "]" * 3000
    for text in (deep, "[1" + "0" * 400 + ".5]", '{"t": 0.' + "0" * 400 + "1}", "[1e-400]"):
        read = exactjson.loads_stored(text)
        assert isinstance(read, exactjson.JsonText)
        assert read == text
    assert isinstance(exactjson.loads_stored(b"[" + b"1" * 400 + b".5]"), exactjson.JsonText)
    # What a double holds is read as before: zeros of every spelling, small and long numbers.
    assert exactjson.loads_stored("[0.0, -0.000, 0e5, 1e-300, 3.14159265358979323846]") == [
        0.0,
        -0.0,
        0.0,
        1e-300,
        3.141592653589793,
    ]
    assert not isinstance(exactjson.loads_stored('"[1]"'), exactjson.JsonText)


def test_loads_stored_finds_a_number_no_double_holds_among_plain_floats() -> None:
    # One such number among thousands of plain floats, in Postgres's spelling (no exponent) or
    # another writer's: a guard for any faster path that skips the check for texts without one.
    plain = ", ".join(f"{i}.25" for i in range(2000))
    for odd in (
        "0." + "0" * 400 + "1",
        "-0." + "0" * 330 + "7",
        "9" * 309 + ".5",
        "1e400",
        "-2.5E-400",
    ):
        text = f"[{plain}, {odd}, 1.5]"
        read = exactjson.loads_stored(text.encode())
        assert isinstance(read, exactjson.JsonText), odd
        assert read == text
    # Near misses are doubles, read as such.
    for near in ("0." + "0" * 300 + "1", "9" * 308 + ".5", '"a1e5"', '"' + "7" * 400 + '"'):
        read = exactjson.loads_stored(f"[{plain}, {near}]")
        assert read == json.loads(f"[{plain}, {near}]"), near
        assert not isinstance(read, exactjson.JsonText)


def test_loads_stored_reads_every_double_at_the_edges_and_nothing_past_them() -> None:
    # The check's edges: the largest double and the least subnormal are read; past them (inf,
    # or a nonzero number read as 0.0) the text is kept; a zero of any spelling is a zero.
    largest = "179769313486231570" + "0" * 291 + ".0"  # Postgres's spelling of the largest
    for text, read in (
        (largest, sys.float_info.max),
        ("-" + largest, -sys.float_info.max),
        ("1.7976931348623157e308", sys.float_info.max),
        ("5e-324", 5e-324),
        ("-0." + "0" * 323 + "5", -5e-324),
        ("2.2250738585072014e-308", sys.float_info.min),
        ("-0.000", -0.0),
        ("0E-400", 0.0),
    ):
        assert exactjson.loads_stored(f"[{text}]") == [read], text
        assert not isinstance(exactjson.loads_stored(f"[{text}]"), exactjson.JsonText), text
    for text in ("1.7976931348623159e308", "17976931348623159" + "0" * 292 + ".5", "2e-324"):
        assert exactjson.loads_stored(f"[{text}]") == f"[{text}]", text
        assert isinstance(exactjson.loads_stored(f"[{text}]"), exactjson.JsonText), text


def test_has_long_int_is_what_pythons_int_to_string_limit_refuses() -> None:
    limit = sys.get_int_max_str_digits()
    assert limit == 4300  # the default the service runs with
    for digits, refused in ((limit - 1, False), (limit, False), (limit + 1, True)):
        for number in (10 ** (digits - 1), 10**digits - 1, -(10**digits - 1)):
            assert exactjson.has_long_int({"n": [number]}) is refused, (digits, number)
            if not refused:
                assert json.dumps(number)
    try:
        # A process whose limit is lower (PYTHONINTMAXSTRDIGITS=640) or off (0).
        sys.set_int_max_str_digits(640)
        assert exactjson.has_long_int([10**640])
        assert not exactjson.has_long_int([10**639])
        assert exactjson.dumps([10**700]) == "[1" + "0" * 700 + "]"
        sys.set_int_max_str_digits(0)
        assert not exactjson.has_long_int([10**10_000])
    finally:
        sys.set_int_max_str_digits(limit)


def test_dumps_writes_a_decimal_nan_or_infinity_as_json_writes_a_float_one() -> None:
    for number in ("NaN", "Infinity", "-Infinity", "sNaN"):
        with pytest.raises(ValueError, match="not JSON compliant"):
            exactjson.dumps([Decimal(number)], allow_nan=False)
    assert exactjson.dumps([Decimal("NaN"), Decimal("-Infinity"), Decimal("sNaN")]) == (
        json.dumps([math.nan, -math.inf, math.nan])
    )


def test_dumps_is_reentrant_and_keeps_no_numbers_after_a_call() -> None:
    # A nested dumps in the same thread replaced the outer call's list of numbers: the outer
    # one raised ValueError (its marks outnumbered its numbers).
    class Nested(Decimal):
        def __str__(self) -> str:
            return exactjson.dumps([Decimal("2.50")])

    assert exactjson.dumps({"a": Nested("1"), "b": Decimal("1.50")}) == ('{"a": [2.50], "b": 1.50}')
    # The last call's numbers were kept alive by the thread's state until its next call.
    exactjson.dumps([Decimal("7." + "1" * 1000)])
    assert exactjson._marks.append is None
