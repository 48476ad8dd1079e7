"""Token estimates for budgets: about four characters per token, a wide character one, rounded up.

A budget is a promise, so the estimate errs high for English prose and code (Gemini's and
tiktoken's tokenisers average 4+ characters per token there). A wide character (CJK, kana,
hangul, fullwidth forms, emoji) takes a token or more in every tokeniser: at four characters a
token, a 2,000-token block of a Chinese transcript held ~1,400 ideographs besides its ASCII,
far over its budget. The estimate is additive from above: the estimate of a concatenation
never exceeds the sum of its parts' estimates (wide characters add exactly, the rest is one
rounding up), which is what lets the builder fit parts one by one and still keep the whole under
budget.
"""

from __future__ import annotations

import re

CHARS_PER_TOKEN = 4
# East Asian Wide and Fullwidth ranges (Unicode's EastAsianWidth W/F, rounded to blocks), and the
# emoji planes. Halfwidth katakana (U+FF61-FF9F) is narrow.
_WIDE = re.compile(
    "[\u1100-\u115f\u2e80-\u303e\u3041-\u33ff\u3400-\u4dbf\u4e00-\u9fff\ua000-\ua4cf"
    "\ua960-\ua97f\uac00-\ud7a3\uf900-\ufaff\ufe10-\ufe19\ufe30-\ufe6f\uff00-\uff60"
    "\uffe0-\uffe6\U0001f000-\U0001faff\U00020000-\U0003fffd]"
)
_ELLIPSIS = "…"


def estimate_tokens(text: str) -> int:
    if text.isascii():
        return -(-len(text) // CHARS_PER_TOKEN)
    wide = len(_WIDE.findall(text))
    return wide + -(-(len(text) - wide) // CHARS_PER_TOKEN)


def truncate_to_tokens(text: str, tokens: int) -> str:
    """The longest prefix of `text` (cut at a word, marked with …) within `tokens`."""
    if estimate_tokens(text) <= tokens:
        return text
    room = tokens * CHARS_PER_TOKEN - 1
    if room <= 0:
        return ""
    if not text.isascii():
        # The longest prefix that fits with its ellipsis: the estimate grows with the length.
        low, high = 0, min(len(text), room)
        while low < high:
            middle = (low + high + 1) // 2
            if estimate_tokens(text[:middle] + _ELLIPSIS) <= tokens:
                low = middle
            else:
                high = middle - 1
        room = low
    cut = text[:room]
    space = cut.rfind(" ")
    if space > room // 2:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS
