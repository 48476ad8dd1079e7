"""Numbers in JSON bodies: pydantic reads `true` as 1 and `false` as 0, so a flag sent for a
count, a score or a duration was stored as one without a word (`limit: true` answered one
result, `ttl: true` made a memory expire after a second)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator


def _refuse_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


NotBool = BeforeValidator(_refuse_bool)
BodyInt = Annotated[int, NotBool]
BodyFloat = Annotated[float, NotBool]
