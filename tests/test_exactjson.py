"""app/exactjson.py: numbers Python's `json` cannot round-trip, parsed and dumped exactly."""

from __future__ import annotations

import json
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
