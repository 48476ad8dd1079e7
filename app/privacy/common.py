"""What every redaction rule shares: the marker, a rule's shape, and the kept-prefix replacement."""

from __future__ import annotations

import re
from collections.abc import Callable

REDACTED = "[REDACTED]"

# --- redact_secrets -----------------------------------------------------------------------------
#
# Speed matters here (every captured payload passes through): Python's regex engine skips ahead
# quickly only when a pattern starts with a literal, so each pattern starts with the distinctive
# part of its secret and checks what precedes it with a lookbehind. Case variants are separate
# patterns for the same reason: IGNORECASE or a leading class disables the fast skip.

_Replacement = str | Callable[[re.Match[str]], str]


def _keep_group(name: str) -> Callable[[re.Match[str]], str]:
    """Replacement that keeps the named prefix group and redacts the rest of the match."""

    def replace(match: re.Match[str]) -> str:
        return f"{match.group(name)}{REDACTED}"

    return replace


_NOT_REDACTED = r"(?!\[REDACTED\])"
# A blank within a line: a space, a tab, or any other space Unicode has (NBSP, U+2000-U+200A,
# U+3000: a rich-text editor's or a chat's paste pads `password\u00a0=\u00a0...` with them),
# not a line break. Generation 13 padded a name's `:` and `=` with spaces and tabs alone, and
# kept a value padded otherwise in clear.
BLANK = r"[^\S\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]"
# What ends a line besides `\n`, as `str.splitlines` reads a text: `\r` alone, `\v`, `\f`,
# the ASCII separators, NEL, U+2028 and U+2029. Generation 13 read `\n` (and `\r\n`) alone, and
# kept in clear a credential whose line another of them ended (`password: hunter2x9\u2028`).
LINE_BREAK_CHARS = r"\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029"
# One line break, `\r\n` as one.
LINE_BREAK = r"(?:\r\n?+|[\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029])"
# What a hyperscan gate (over UTF-8 bytes) reads as a blank or a line break: any byte of a
# non-ASCII character may be one's.
GATE_SPACE = r"[\x09-\x0d\x1c-\x20\x80-\xff]"
# And as a blank within a line (`BLANK`).
GATE_BLANK = r"[\t \x1f\x80-\xff]"
# Not a value but a reference to one: `${NPM_TOKEN}`, `{self.account_key}`, `<password>`.
_NOT_A_REFERENCE = r"(?![{$<])"

# (literals, pattern, replacement). Every match of the pattern contains one of its literals, so
# a pattern runs only when `literal in s` finds one: `in` is a C substring search many times
# faster than the regex engine's prefix scan, and most text holds none of them (in the capture
# profile the 33 regex passes over every 1-20 KB string were the largest CPU cost).
_Rule = tuple[tuple[str, ...], re.Pattern[str], _Replacement]
