"""Capping a text to a size, its head and tail kept around a marker stating what was cut."""

from __future__ import annotations

import re

ELISION_START = "…[truncated: "
# The marker as readers find it in a capped text: group 1 is the original size in characters.
ELISION_MARKER = re.compile(r"\n…\[truncated: (\d+) chars originally, [^\]\n]*\]…\n")


def elision_marker(original_chars: int, kept_head: int, kept_tail: int) -> str:
    omitted = original_chars - kept_head - kept_tail
    return (
        f"\n{ELISION_START}{original_chars} chars originally, {omitted} omitted, "
        f"kept first {kept_head} and last {kept_tail}]…\n"
    )


def cap_text(s: str, max_chars: int) -> str:
    """Keep the head and tail of `s` within `max_chars`, with a marker stating the original size.

    Text already within the cap is returned unchanged. The head gets two thirds of the room,
    because a tool's output usually says what it is at the start and how it ended at the end.
    """
    if len(s) <= max_chars:
        return s
    original = len(s)
    # The marker's own length depends on the numbers in it; size it with the widest values.
    room = max_chars - len(elision_marker(original, original, original))
    if room <= 0:
        return s[:max_chars]
    head = room * 2 // 3
    tail = room - head
    return s[:head] + elision_marker(original, head, tail) + (s[-tail:] if tail else "")
