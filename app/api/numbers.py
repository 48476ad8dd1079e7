"""Numbers in JSON bodies and tool arguments: pydantic reads `true` as 1 and `false` as 0, so a
flag sent for a count, a score or a duration was stored as one without a word (`limit: true`
answered one result, `ttl: true` made a memory expire after a second)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator


def _refuse_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


def _refuse_bool_or_text(value: object) -> object:
    if isinstance(value, str):
        raise ValueError("must be a number, not a string")
    return _refuse_bool(value)


NotBool = BeforeValidator(_refuse_bool)
BodyInt = Annotated[int, NotBool]
BodyFloat = Annotated[float, NotBool]
# An MCP tool's argument: its published schema says integer, and the SDK validates the call's
# arguments in pydantic's lax mode, which read `true` as 1 and `"5"` as 5 before a tool saw them.
# A whole float (5.0) is still the number it is.
ToolInt = Annotated[int, BeforeValidator(_refuse_bool_or_text)]
