"""The code-aware search terms of a text: the parts of its identifier-like tokens.

Postgres's English parser keeps `validateToken` as one word and `auth/jwt.ts` as one file token,
so a search for `validate token` or `jwt` would miss them. The parts are computed here, once per
row, and stored in `memory_chunks.search_terms`; the generated `tsv` indexes the content and these
terms. Only identifier-like tokens contribute, so the second `to_tsvector` reads a few dozen
characters instead of a second copy of the whole text (the old all-SQL split with two
`regexp_replace` calls cost more than the rest of a row's indexing).
"""

from __future__ import annotations

import re

# A token with an inner separator (`validate_token`, `auth/jwt.ts`, `a.b-c`) or an inner
# lower-or-digit-to-upper step (`validateToken`, `HTTPServer2Go`).
_IDENTIFIER = re.compile(r"(?:[^\W_]+(?:[^\w\s]+|_+))+[^\W_]+|\w*[a-z0-9][A-Z]\w*")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[\W_]+")


def search_terms(text: str) -> str:
    """The parts of `text`'s identifier-like tokens, space separated ("" when there are none)."""
    found = _IDENTIFIER.findall(text)
    if not found:
        return ""
    split = _SEPARATORS.sub(" ", _CAMEL.sub(r"\1 \2", " ".join(found)))
    return split.strip()
