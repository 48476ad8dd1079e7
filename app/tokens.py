"""The app's one token estimate: about four characters a token, a wide character one, rounded up.

Every budget and size in tokens uses it: the context block, the resume briefing, the worker's
compression counts, and sync's chunk sizes (`token_length`, the splitters' length). Before, only
the context block counted wide characters: a Chinese memory file was chunked at four characters
a token, ~4x its token setting.

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

CHARS_PER_TOKEN = 4
# Wide characters are counted from their UTF-8 lead bytes: E3-ED starts U+3000-U+DFFF (CJK
# punctuation, kana, CJK ideographs, Yi, hangul), EF U+F000-U+FFFF (CJK compatibility, fullwidth
# forms), F0 U+10000-U+3FFFF (emoji, rarer ideographs). A few narrow characters in those ranges
# (halfwidth katakana, U+FFFD) count as wide, which errs high as a budget should; deleting the
# bytes with `bytes.translate` took ~9 us for an 8 KB block where a regex of the ranges took ~37.
_WIDE_LEADS = bytes(range(0xE3, 0xEE)) + b"\xef\xf0"
_ELLIPSIS = "…"


def wide_in_utf8(data: bytes) -> int:
    """The wide characters in UTF-8 `data` (for a caller that holds the bytes already)."""
    return len(data) - len(data.translate(None, _WIDE_LEADS))


def _wide(text: str) -> int:
    return wide_in_utf8(text.encode("utf-8", "surrogatepass"))


def estimate_from_counts(chars: int, wide: int) -> int:
    """The estimate of a text of `chars` characters, `wide` of them wide."""
    return wide + -(-(chars - wide) // CHARS_PER_TOKEN)


def estimate_tokens(text: str) -> int:
    if text.isascii():
        return -(-len(text) // CHARS_PER_TOKEN)
    return estimate_from_counts(len(text), _wide(text))


def token_length(text: str) -> int:
    """`text`'s length in characters with a wide character counted as `CHARS_PER_TOKEN`: the
    estimate before rounding, for code that sizes text in characters (the sync's splitters).
    ASCII text's length is unchanged, so are its chunks."""
    if text.isascii():
        return len(text)
    return len(text) + (CHARS_PER_TOKEN - 1) * _wide(text)


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
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space > room // 2:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS
