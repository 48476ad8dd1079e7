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


NotBool = BeforeValidator(_refuse_bool)
BodyInt = Annotated[int, NotBool]
BodyFloat = Annotated[float, NotBool]
# An MCP tool's argument: read as a body's number is, text included ("5" is 5). Clients send the
# model's numbers as text (Claude Code, anthropics/claude-code#32524; OpenHands#8448), and a
# refusal was sent back as text again by the same client: the argument could not be used.
ToolInt = BodyInt
