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
# Not a value but a reference to one: `${NPM_TOKEN}`, `{self.account_key}`, `<password>`.
_NOT_A_REFERENCE = r"(?![{$<])"

# (literals, pattern, replacement). Every match of the pattern contains one of its literals, so
# a pattern runs only when `literal in s` finds one: `in` is a C substring search many times
# faster than the regex engine's prefix scan, and most text holds none of them (in the capture
# profile the 33 regex passes over every 1-20 KB string were the largest CPU cost).
_Rule = tuple[tuple[str, ...], re.Pattern[str], _Replacement]
