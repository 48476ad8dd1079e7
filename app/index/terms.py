"""The code-aware search terms of a text: the parts of its identifier-like tokens.

Postgres's English parser keeps `validateToken` as one word and `auth/jwt.ts` as one file token,
so a search for `validate token` or `jwt` would miss them. The parts are computed here, once per
row, and stored in `memory_chunks.search_terms`; the generated `tsv` indexes the content and these
terms. Only identifier-like tokens contribute, so the second `to_tsvector` reads a few dozen
characters instead of a second copy of the whole text (the old all-SQL split with two
`regexp_replace` calls cost more than the rest of a row's indexing).

A token's parts are words as Postgres's parser and the keyword query (`words`, shared with
`app.search.queries.keyword_terms`) read them: a combining mark or a zero-width joiner stays in
its word. Split there, `getCafé` (a decomposed é) stored `get Cafe`, which the query `café` did
not find, and every Devanagari word with a vowel sign inside (`टोकन`, read as a token by the
spot below) stored its bare letters (`ट कन`), which the word `कन` matched.
"""

from __future__ import annotations

import re
import unicodedata

# Where a token turns code-like: a separator before a word character (`[^\s\w]\w|_\w`), or a
# lower-to-upper step (`[a-z0-9][A-Z]`, found here at its upper-case letter). Only these spots are
# expanded to their whitespace-delimited token; scanning for them is several times cheaper than
# matching whole identifiers at every position (the text is mostly prose). Written to open with
# one character class that excludes spaces, lower-case letters and digits, so the regex engine
# skips prose with its fast class scan instead of trying three alternatives at every character
# (2.5x faster on the sync benchmark's chunks, the same output).
_SPOT = re.compile(r"[^\sa-z0-9](?:(?<=[a-z0-9][A-Z])|(?<=[^\s\w]|_)\w)")
_TOKEN_REST = re.compile(r"\S*")
_LOOK_BACK = 200  # longer tokens are data (hashes, base64), not identifiers
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[\W_]+")
_WORD = re.compile(r"[^\W_]+")

# ZERO WIDTH NON-JOINER and JOINER are format characters, not marks, but they sit inside a word
# to choose a conjunct's or a ligature's form (Devanagari `क्\u200dष`, Persian `می\u200cخواهم`),
# and Postgres's parser keeps them in the word as it keeps marks.
_JOINERS = frozenset("\u200c\u200d")


def _stays_in_word(char: str) -> bool:
    return char in _JOINERS or unicodedata.category(char)[0] == "M"


def words(text: str) -> list[str]:
    """The alphanumeric runs of `text`, each with the combining marks (and zero-width joiners)
    inside and after it.

    Postgres's parser keeps a mark in its word (`é` written `e` + U+0301, the vowel signs of
    Devanagari or Tamil); `_WORD` alone split there, and `टोकन` became the bare letters `ट` and
    `कन`, which every row holding those fragments matched."""
    if text.isascii():
        # No mark or joiner is ASCII: the runs are the words. The walk below costs ~2 µs of
        # every English query (docs/benchmarks.md, "Branch perf28").
        return _WORD.findall(text)
    found: list[str] = []
    # The word is sliced once, when it ends: growing it a run at a time copied it again for
    # every mark (letter, mark, letter, mark… was quadratic: 160k characters 3.4 s).
    word_start = joined_to = -1
    for match in _WORD.finditer(text):
        start, end = match.span()
        while end < len(text) and _stays_in_word(text[end]):
            end += 1
        if start != joined_to:
            if word_start >= 0:
                found.append(text[word_start:joined_to])
            word_start = start
        joined_to = end
    if word_start >= 0:
        found.append(text[word_start:joined_to])
    return found


def _parts(token: str) -> str:
    """The token's words, camelCase split, space separated."""
    split = _CAMEL.sub(r"\1 \2", token)
    # ASCII (nearly every token) has no mark: one substitution, the cheaper way to the same words.
    if split.isascii():
        return _SEPARATORS.sub(" ", split).strip()
    return " ".join(words(split))


def search_terms(text: str) -> str:
    """The parts of `text`'s identifier-like tokens, space separated ("" when there are none)."""
    out: list[str] = []
    taken = 0  # end of the last token expanded: later spots inside it are skipped
    for spot in _SPOT.finditer(text):
        at = spot.start()
        if spot.end() - at == 1:  # the upper-case letter of a lower-to-upper step
            at -= 1
        if at < taken:
            continue
        # Look back a bounded stretch: without a bound each search rescans the text before it.
        low = max(taken, at - _LOOK_BACK)
        start = max(low - 1, text.rfind(" ", low, at), text.rfind("\n", low, at)) + 1
        end = _TOKEN_REST.match(text, at).end()  # type: ignore[union-attr]
        taken = end
        parts = _parts(text[start:end])
        if " " in parts:
            out.append(parts)
    return " ".join(out)


def index_terms(text: str, headings: str = "") -> str:
    """What `memory_chunks.search_terms` holds for a chunk: the parts of its identifier-like
    tokens, then the titles of the sections it sits in (words and parts), so a chunk cut from
    the middle of `## Error Handling` is still found by `error handling`."""
    if not headings:
        return search_terms(text)
    return " ".join(part for part in (search_terms(text), headings, search_terms(headings)) if part)
