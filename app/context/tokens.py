"""Token estimates for budgets: about four characters per token, rounded up.

A budget is a promise, so the estimate errs high for English prose and code (Gemini's and
tiktoken's tokenisers average 4+ characters per token there). It is additive from above: the
estimate of a concatenation never exceeds the sum of its parts' estimates, which is what lets the
builder fit parts one by one and still keep the whole under budget.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def truncate_to_tokens(text: str, tokens: int) -> str:
    """The longest prefix of `text` (cut at a word, marked with …) within `tokens`."""
    if estimate_tokens(text) <= tokens:
        return text
    room = tokens * CHARS_PER_TOKEN - 1
    if room <= 0:
        return ""
    cut = text[:room]
    space = cut.rfind(" ")
    if space > room // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"
