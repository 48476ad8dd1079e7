"""`<private>` spans and our own injected `<memory>` blocks, removed before text is stored.

The public `strip_private` and `strip_private_lines` (app/privacy/engine.py) first find which
literals a text holds in the one scan every rule shares; these take that answer."""

from __future__ import annotations

import re
from collections.abc import Callable

# Patterns start with a literal "<" so that the regex engine can skip ahead with a fast search.
# A private span's opening or closing tag. Spans nest: the text stays hidden until the closing
# tag of the first opening one (a regex to the first closing tag showed the outer span's rest);
# an unclosed <private> hides everything after it: losing text is better than leaking it.
_PRIVATE_TAG = re.compile(r"<(?:(?P<close>/)(?i:private)\s*|(?i:private)(?:\s[^>]*)?)>")
# Only complete <memory> blocks are ours (the context builder always closes them); a lone
# "<memory>" in someone's code is left alone.
_MEMORY = re.compile(r"<(?i:memory)(?:\s[^>]*)?>.*?</(?i:memory)\s*>\n?", re.DOTALL)


_PRIVATE_LITERALS = ("rivate", "RIVATE")
_MEMORY_LITERALS = ("emory", "EMORY")


def _strip_private(s: str, found: frozenset[str]) -> str:
    """`strip_private` given the literals of `_SCANNER` that occur in `s`."""
    if "<" not in found:
        return s
    if not found.isdisjoint(_PRIVATE_LITERALS):
        s = _without_private(s, _PRIVATE_TAG, _nothing)
    if not found.isdisjoint(_MEMORY_LITERALS):
        s = _MEMORY.sub("", s)
    return s


def _without_private(s: str, outside: re.Pattern[str], removed: Callable[[str], str]) -> str:
    """`s` with each private span replaced by `removed(span)`; `outside` finds the next tag
    where no span is open (and what is not one there: markdown's code spans). A closing tag
    outside any span is text. Spans nest; tags that never balance hide up to the last closing
    tag, or, with none after the opening one, the rest of the text: a mention of the tag before
    a real span ("wrap secrets in <private> tags") hid everything after that span."""
    parts: list[str] = []
    kept = position = 0
    while (match := outside.search(s, position)) is not None:
        position = match.end()
        if match.group("close") is not None or match.lastgroup == "code":
            continue
        start, depth, last_close = match.start(), 1, None
        while depth:
            tag = _PRIVATE_TAG.search(s, position)
            if tag is None:
                position = len(s) if last_close is None else last_close
                break
            position = tag.end()
            if tag.group("close") is not None:
                depth, last_close = depth - 1, position
            else:
                depth += 1
        parts += (s[kept:start], removed(s[start:position]))
        kept = position
    if not parts:
        return s
    parts.append(s[kept:])
    return "".join(parts)


def _nothing(_: str) -> str:
    return ""


def _newlines_of(span: str) -> str:
    return "\n" * span.count("\n")


# A markdown file is stripped whole, before it is chunked: stripped chunk by chunk, a span
# crossing a chunk boundary showed its inside in the next chunk (chunks overlap and each was
# sanitized alone). A span becomes the newlines it held, so every later line keeps its number,
# and a <private> tag inside an inline code span (docs about the tag) is text, not a span. Our
# <memory> blocks go wherever they are: one kept in a chunk would nest in the context block.
_MARKDOWN_PRIVATE_TAG = re.compile(f"(?P<code>`[^`\\n]*`)|{_PRIVATE_TAG.pattern}")


def _strip_private_lines(s: str, found: frozenset[str]) -> str:
    """`_strip_private` for a markdown file: each span becomes its newlines, code spans kept."""
    if "<" not in found:
        return s
    if not found.isdisjoint(_PRIVATE_LITERALS):
        s = _without_private(s, _MARKDOWN_PRIVATE_TAG, _newlines_of)
    if not found.isdisjoint(_MEMORY_LITERALS):
        s = _MEMORY.sub(_newlines, s)
    return s


def _newlines(match: re.Match[str]) -> str:
    return _newlines_of(match.group())
