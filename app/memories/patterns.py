"""Key patterns: `*` matches any run of characters (dots included); everything else is literal.

Patterns become SQL LIKE expressions with every LIKE metacharacter escaped, so keys holding `%`,
`_`, `\\` or regex-looking characters (`.`, `[`, `(`) match only themselves.
"""

from __future__ import annotations

import re
import unicodedata

LIKE_ESCAPE = "\\"


def is_pattern(key: str) -> bool:
    return "*" in key


def pattern_to_like(pattern: str) -> str:
    """`project.*` -> `project.%`, with `\\`, `%` and `_` escaped by a backslash; NFC, as keys
    are stored (`app.memories.schemas.check_key`)."""
    pattern = unicodedata.normalize("NFC", pattern)
    escaped = pattern.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2).replace("%", r"\%").replace("_", r"\_")
    return re.sub(r"\*+", "%", escaped)
