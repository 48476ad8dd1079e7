"""The rules in order, found in one scan, applied to text and to JSON values (`sanitize_json`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from functools import lru_cache
from math import isfinite
from typing import Any

from app.exactjson import PAST_A_DOUBLE, NumberOutOfRange, check_decimal
from app.privacy.assignments import _CONFIG_AFTER_BREAK, ASSIGNMENT_RULES, QUOTED_NAMES
from app.privacy.clean import _SURROGATE, clean_text
from app.privacy.commands import COMMAND_GATES, COMMAND_RULES
from app.privacy.common import GATE_BLANK, GATE_SPACE, REDACTED, _Replacement, _Rule
from app.privacy.connections import CONNECTION_RULES, QUERY_GATE, QUERY_RULES, REGISTRY_RULES
from app.privacy.lists import LIST_GATES, LIST_NAME_GATES, LIST_RULES, plural_name
from app.privacy.names import (
    _CREDENTIAL_NAME,
    _PWD_NAME,
    basic_credentials,
    credential_key,
    known_value,
    listed_credential,
)
from app.privacy.options import OPTION_GATES, OPTION_RULES
from app.privacy.private import (
    _MEMORY_LITERALS,
    _PRIVATE_LITERALS,
    _strip_private,
    _strip_private_lines,
)
from app.privacy.tokens import (
    API_HEADER_GATES,
    AWS_RULES,
    HEADER_RULES,
    KEY_RULES,
    SERVICE_RULES,
)
from app.textscan import SHORT_TEXT, LiteralScanner

# Deep enough for any real tool payload; shallow enough that recursion never nears Python's limit.
DEFAULT_MAX_DEPTH = 64


class NestingTooDeep(ValueError):
    """A JSON value nests deeper than allowed."""


# In the order they run: a rule sees the text as the rules before it left it.
_RULES: list[_Rule] = [
    *KEY_RULES,
    *REGISTRY_RULES,
    *COMMAND_RULES,
    *CONNECTION_RULES,
    *QUERY_RULES,
    *OPTION_RULES,
    *AWS_RULES,
    *SERVICE_RULES,
    *HEADER_RULES,
    *ASSIGNMENT_RULES,
    *LIST_RULES,
]


# Finer gates for the rules whose literals most real text holds ("token", "key", "://" occur
# in ~half of the capture benchmark's strings, nearly never as a credential): hyperscan
# expressions over the UTF-8 bytes that match wherever the rule's regex can (each is the regex
# with lookarounds dropped, `\s` widened to every byte a Unicode space can use, and character
# classes widened to bytes), found in the same pass as the literals. A rule runs only when its
# literal and its gate occur. Replacements insert only "[REDACTED]" next to text they keep, so
# they cannot create a match that the text did not already gate in, as for the literals.
_SPACE = f"{GATE_SPACE}*"
# A triple-quoted value (`_TRIPLE_QUOTED`) opens with `""`, which a value of one pair's does not,
# and may hold a quote (`"""ab"cd"""`): any triple quote lets the rule run. A string's prefix
# (`r"`, `rb"`, `f"""`, a template's `t"`) may come first.
_QUOTED = (
    r"""[bBfFrRtTuU]{0,2}(?:"{1,3}[^"]{4,}"|'{1,3}[^']{4,}'|"{3}|'{3}"""
    # An escaped quote inside a value (`"ab\"cd1234"`): the assignment rule reads past it.
    r"""|"(?:[^"\\]|\\[^\n]){4,}"|'(?:[^'\\]|\\[^\n]){4,}')"""
)
_QUOTED_RULES = [pattern for _, pattern, _ in _RULES if r"(?P<sep>\s*[:=]\s*)" in pattern.pattern]
_UNQUOTED_BYTE = r"[^\x09-\x0d\x20\"'#(){}\[\]<>$,;&|`\\]"
_CONFIG_RULE = next(pattern for _, pattern, _ in _RULES if pattern.flags & re.MULTILINE)
# A value holding a character no identifier has, a word of letters ending the line, or `<…>`.
_CONFIG_GATE = (
    rf"(?:{_CREDENTIAL_NAME}|{_PWD_NAME}){GATE_BLANK}*[:=]{GATE_BLANK}*(?:{_UNQUOTED_BYTE}*"
    rf"[^A-Za-z_.\x09-\x0d\x20\"'#(){{}}\[\]<>$,;&|`\\]|[A-Za-z]+{GATE_BLANK}*(?:{GATE_SPACE}|$)"
    r"|<[^<>\n]+>)"
)
# The line breaks other than `\n` (UTF-8 bytes) the after-break rule reads: one byte or NEL, and
# U+2028/U+2029; then that line, read up to a credential's name and the unquoted rule's gate.
_SHORT_BREAK = r"(?:[\r\x0b\x0c\x1c-\x1e]|\xc2\x85)"
_LINE_SEPARATOR = r"\xe2\x80[\xa8\xa9]"
_AFTER_BREAK_LINE = (
    r"[\t \x1f\x80-\xff]*"
    rf"(?:-[\t \x80-\xff]+)?(?:export[\t ]+)?[\w.\-\x80-\xff]*{_CONFIG_GATE}"
)
_RULE_GATES: dict[re.Pattern[str], str] = {
    next(pattern for literals, pattern, _ in _RULES if literals == ("://",)): r"://[^:/@]*:[^@/]+@",
    **{
        pattern: rf"{name}[\"']?{_SPACE}[:=]{_SPACE}{_QUOTED}"
        for pattern, (_, _, name) in zip(_QUOTED_RULES, QUOTED_NAMES, strict=True)
    },
    **API_HEADER_GATES,
    **OPTION_GATES,
    **COMMAND_GATES,
    **LIST_GATES,
    QUERY_RULES[0][1]: QUERY_GATE,
    # A value holding a character no identifier has, a word of letters ending the line, or `<…>`.
    _CONFIG_RULE: _CONFIG_GATE,
    # After a line break other than `\n` (its UTF-8 bytes), on that line: in a long text that has
    # none, the rule's scan for one is skipped (~2.7 µs a value on the capture benchmark's).
    _CONFIG_AFTER_BREAK: (
        rf"(?:[\r\x0b\x0c\x1c-\x1e]|\xc2\x85|{_LINE_SEPARATOR}){_AFTER_BREAK_LINE}"
    ),
}

# What the scan looks for as a rule's gate: the gate above, or a narrower one that still selects
# the rule wherever it can change the text (`LIST_NAME_GATES`: a `key` name's list only under a
# credential word's letter). The output is the same, so the rules' digest records the gates above.
_SCANNED_GATES = {
    pattern: LIST_NAME_GATES.get(pattern, gate) for pattern, gate in _RULE_GATES.items()
}
# The rule after another line break than `\n` is scanned for by its own gate after a one-byte
# break or NEL: a text's `\r` is common (a progress bar redraws its line with one), and a break
# anywhere with a credential's name anywhere ran the rule over every such text (~45x on a 426 KB
# progress bar's output). After U+2028/U+2029 it is scanned for as the bare break, both gates
# needed: its own gate there ran hyperscan's automaton from every `\xe2\x80` (a curly quote's,
# a dash's first bytes) over an unbounded run of bytes: ~0.9 µs a value on the capture
# benchmark's (bench/capture_steps.py).
_SCANNED_GATES[_CONFIG_AFTER_BREAK] = rf"{_SHORT_BREAK}{_AFTER_BREAK_LINE}|{_LINE_SEPARATOR}"
_ALSO_GATED_BY = {_CONFIG_AFTER_BREAK: _CONFIG_RULE}

# Every literal the privacy rules test for, and the gates above, found in one pass (see
# app/textscan.py).
_SCANNER = LiteralScanner(
    ("<", *_PRIVATE_LITERALS, *_MEMORY_LITERALS, *(lit for rule in _RULES for lit in rule[0])),
    gates={f"gate:{pattern.pattern}": expression for pattern, expression in _SCANNED_GATES.items()},
)
# (literals, the gates' names, pattern, replacement) in rule order.
_PLAN = [
    (
        literals,
        tuple(
            f"gate:{gated.pattern}"
            for gated in (pattern, _ALSO_GATED_BY.get(pattern))
            if gated is not None and gated in _RULE_GATES
        ),
        pattern,
        replacement,
    )
    for literals, pattern, replacement in _RULES
]


def strip_private(s: str) -> str:
    """Remove `<private>…</private>` spans and our own injected `<memory>…</memory>` blocks."""
    return _strip_private(s, _SCANNER.present(s))


def strip_private_lines(s: str) -> str:
    """`strip_private` for a markdown file: each span becomes its newlines, code spans kept."""
    return _strip_private_lines(s, _SCANNER.present(s))


def redact_secrets(s: str) -> str:
    """Replace API keys, tokens, bearer credentials and passwords with `[REDACTED]`."""
    return _redact(s, _SCANNER.present(s))


def _redact(s: str, found: frozenset[str]) -> str:
    """`redact_secrets` given the literals of `_SCANNER` that occur in `s`.

    The literals are found once, before the first rule runs; a rule's replacement never creates
    a literal that was not there (it keeps text around its match and inserts `[REDACTED]`, which
    holds none), so a rule skipped here is one that the per-rule `in` test would skip too. A rule
    whose literal an earlier rule removed runs and finds nothing, as no match lacks its literal.
    """
    for pattern, replacement in _rules_for(found):
        s = pattern.sub(replacement, s)
    return s


def redact_secrets_lines(s: str) -> str:
    """`redact_secrets` for a markdown file before it is chunked: a secret spanning lines (a PEM
    key) becomes `[REDACTED]` and the newlines it held, so every later line keeps its number.

    Redacted chunk by chunk instead, a key longer than a chunk showed its later lines in the
    next chunks: the `-----BEGIN` line, which the rule needs, was in the first one only."""
    for pattern, replacement in _rules_for(_SCANNER.present(s)):
        s = pattern.sub(_keeping_lines(replacement), s)
    return s


def _keeping_lines(replacement: _Replacement) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        text = replacement if isinstance(replacement, str) else replacement(match)
        return text + "\n" * (match.group().count("\n") - text.count("\n"))

    return replace


# Few distinct sets of found literals occur, and testing every rule against one cost ~3 µs a
# string, for the same answer each time.
@lru_cache(maxsize=1024)
def _rules_for(found: frozenset[str]) -> tuple[tuple[re.Pattern[str], _Replacement], ...]:
    """The rules, in order, whose literal (and gate, if they have one) `found` holds."""
    return tuple(
        (pattern, replacement)
        for literals, gates, pattern, replacement in _PLAN
        if not found.isdisjoint(literals) and all(gate in found for gate in gates)
    )


# --- sanitize -----------------------------------------------------------------------------------


def sanitize_text(s: str) -> str:
    """Clean, strip private and injected-memory spans, then redact secrets."""
    return sanitize_string(s)[0]


# The names `_SCANNER` can report: what the rules look at, in a set found by a wider scanner.
_NAMES = frozenset(_SCANNER.names)


def privacy_scanner(
    literals: Iterable[str], gates: Mapping[str, str] | None = None
) -> LiteralScanner:
    """A scanner for `sanitize_json(scanner=...)`: the privacy rules' literals and gates, and
    these, found in one pass, so that a caller learns what its own literals need of a text from
    the scan sanitizing it already makes (the capture entities' gates)."""
    return _SCANNER.extended(literals, gates)


def _clean_encoded(s: str) -> tuple[str, bytes]:
    """`clean_text(s)` and its UTF-8, encoded once for both the surrogate check and the scan."""
    try:
        utf8 = s.encode("utf-8")
    except UnicodeEncodeError:
        s = _SURROGATE.sub("\ufffd", s)
        utf8 = s.encode("utf-8")
    if b"\x00" in utf8:  # a NUL byte in UTF-8 is only ever the NUL character
        s = s.replace("\x00", "")
        utf8 = utf8.replace(b"\x00", b"")
    return s, utf8


def sanitize_string(
    s: str, scanner: LiteralScanner | None = None
) -> tuple[str, frozenset[str] | None, bytes | None]:
    """`sanitize_text(s)`; what `scanner` (from `privacy_scanner`) found in the text returned,
    None if stripping or redaction changed it; and the returned text's UTF-8 when the scan
    encoded it anyway (a text of SHORT_TEXT characters or more that sanitizing left as it was),
    else None."""
    scanner = scanner or _SCANNER
    utf8: bytes | None = None
    if len(s) < SHORT_TEXT:
        s = clean_text(s)
        found = scanner.present(s)
    else:
        s, utf8 = _clean_encoded(s)
        found = scanner.present_encoded(s, utf8)
    own = found if scanner is _SCANNER else found & _NAMES
    stripped = _strip_private(s, own)
    if stripped is not s:
        # Removing a span can join text into a literal that was not there before.
        found = scanner.present(stripped)
        own = found if scanner is _SCANNER else found & _NAMES
    redacted = _redact(stripped, own)
    if redacted is not s:
        return redacted, (found if redacted is stripped else None), None
    return redacted, found, utf8


# What a scanner found in each string of a sanitized value: id(string) -> (string, names).
Scanned = dict[int, tuple[str, frozenset[str]]]


def sanitize_json(
    value: Any,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    scanner: LiteralScanner | None = None,
    scanned: Scanned | None = None,
    refuse_unstorable: bool = True,
    floats: list[float] | None = None,
) -> Any:
    """Apply `sanitize_text` to every string (keys too) of a JSON value; returns a new value.

    With `scanner` (from `privacy_scanner`) and `scanned`, each string value of the result whose
    scan is still valid (sanitizing left it unchanged) gets its found names in `scanned`.
    Raises NestingTooDeep when containers nest deeper than `max_depth`, NumberOutOfRange for a
    NaN or infinite float (what pydantic and `json` read `1e400` as): stored, orjson wrote it as
    null and json as `Infinity`, which Postgres refuses; and for a `Decimal` (`exactjson.loads`)
    that `exactjson.check_numbers` refuses (`1e-999999`). Without `refuse_unstorable` such a
    Decimal is kept: a transcript's tool call is indexed as its text, digits and all, never
    stored as jsonb.

    With `floats`, each float met on the way is appended to it, none refused: a caller whose
    value a parser made floats of (`1e-400` as 0.0) learns it needs the value read exactly
    without a walk of its own (capture's, ~0.6 ms on 22 KB of arguments).
    """
    return _sanitize(value, max_depth, scanner or _SCANNER, scanned, refuse_unstorable, floats)


def _sanitize(
    value: Any,
    depth_left: int,
    scanner: LiteralScanner,
    scanned: Scanned | None,
    refuse_unstorable: bool,
    floats: list[float] | None,
) -> Any:
    if isinstance(value, str):
        clean, found, _utf8 = sanitize_string(value, scanner)
        if scanned is not None and found is not None:
            scanned[id(clean)] = (clean, found)
        return clean
    if isinstance(value, dict):
        if depth_left <= 0:
            raise NestingTooDeep("the JSON value nests too deeply")
        out: dict[str, Any] = {}
        for key, item in value.items():
            clean_key, secret = _key(str(key))
            plural = plural_name(clean_key) if isinstance(item, list | tuple) else None
            if isinstance(item, str) and item and _credential(clean_key, secret, item):
                out[clean_key] = REDACTED
            elif plural is not None:
                out[clean_key] = _sanitize_listed(
                    plural, item, depth_left - 1, scanner, scanned, refuse_unstorable, floats
                )
            else:
                out[clean_key] = _sanitize(
                    item, depth_left - 1, scanner, scanned, refuse_unstorable, floats
                )
        return out
    if isinstance(value, list | tuple):
        if depth_left <= 0:
            raise NestingTooDeep("the JSON value nests too deeply")
        return [
            _sanitize(item, depth_left - 1, scanner, scanned, refuse_unstorable, floats)
            for item in value
        ]
    # Checked on the walk the value takes anyway: a walk of its own, or a search of its JSON
    # for the null orjson makes of inf, cost up to ~17 µs on a 20 KB capture.
    if value.__class__ is float:
        if floats is not None:
            # The caller reads the value again exactly and sanitizes that, which judges it: 1e400
            # (inf here) is a number the database keeps.
            floats.append(value)
        elif not isfinite(value):
            raise NumberOutOfRange(PAST_A_DOUBLE)
    elif value.__class__ is Decimal and refuse_unstorable:
        # A number read exactly (`exactjson.loads`): one the database cannot keep is refused.
        check_decimal(value)
    return value


def _sanitize_listed(
    plural: tuple[str, bool],
    items: list[Any] | tuple[Any, ...],
    depth_left: int,
    scanner: LiteralScanner,
    scanned: Scanned | None,
    refuse_unstorable: bool,
    floats: list[float] | None,
) -> list[Any]:
    """`_sanitize` of a list under a credential's name: each string element redacted whole as
    `_listed` judges it, and so in a list nested in it (`[["user", "hunter2"]]`)."""
    if depth_left <= 0:
        raise NestingTooDeep("the JSON value nests too deeply")
    return [
        REDACTED
        if _listed(plural, element)
        else _sanitize_listed(
            plural, element, depth_left - 1, scanner, scanned, refuse_unstorable, floats
        )
        if isinstance(element, list | tuple)
        else _sanitize(element, depth_left - 1, scanner, scanned, refuse_unstorable, floats)
        for element in items
    ]


def redact_json(value: Any) -> Any:
    """`redact_secrets` applied to every string (keys too) of a JSON value, and a string under
    a credential-named key redacted whole, as `sanitize_json` does; nothing else of
    `sanitize_json` (no cleaning, no `<private>` stripping, no depth limit: the value was
    stored). For re-applying the rules to what is stored (app/redaction.py)."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            clean_key = redact_secrets(key)
            secret = _credential_key(clean_key)
            plural = plural_name(clean_key) if isinstance(item, list) else None
            if isinstance(item, str) and item and _credential(clean_key, secret, item):
                out[clean_key] = REDACTED
            elif plural is not None:
                out[clean_key] = _redact_listed(plural, item)
            else:
                out[clean_key] = redact_json(item)
        return out
    if isinstance(value, list):
        return [redact_json(item) for item in value]
    return value


def _redact_listed(plural: tuple[str, bool], items: list[Any]) -> list[Any]:
    """`redact_json` of a list under a credential's name, as `_sanitize_listed` judges it."""
    return [
        REDACTED
        if _listed(plural, element)
        else _redact_listed(plural, element)
        if isinstance(element, list)
        else redact_json(element)
        for element in items
    ]


# A JSON string literal, or a bracket. No quote stands unescaped inside a literal, and none
# outside one: in a JSON text, every match from the start is a whole string (key or value) or a
# bracket outside every string.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_COLON = re.compile(r"\s*:\s*")


def redact_json_text(text: str) -> str:
    """`redact_json` of a JSON text, done on the text: each string literal (keys too) redacted
    in place and written back as JSON, a string right after a credential-named key redacted
    whole, and so is a string element of a list under a credential's plural name
    (`"passwords": [...]`); everything else (numbers, nesting, spacing) kept as written.

    For a stored value nested past Python's recursion limit, which Postgres takes and no parse
    here can read (app/redaction.py). Its brackets are counted on a list, not by recursion."""
    pieces: list[str] = []
    done = 0
    credential: tuple[str, bool] | None = None  # the key whose value starts at `value_at`
    value_at = -1
    # Per open bracket: the credential plural whose list it opens or is nested in, else None.
    open_lists: list[tuple[str, bool] | None] = []
    for match in _JSON_TOKEN.finditer(text):
        literal = match.group()
        if literal in "[{":
            plural = None
            if literal == "[" and credential is not None and match.start() == value_at:
                plural = plural_name(credential[0])
            elif literal == "[" and open_lists:
                plural = open_lists[-1]  # a list nested in a credential's holds its credentials
            open_lists.append(plural)
            continue
        if literal in "]}":
            if open_lists:
                open_lists.pop()
            continue
        old = json.loads(literal)
        colon = _COLON.match(text, match.end())
        if colon is not None:  # a key
            new = redact_secrets(old)
            credential, value_at = (new, _credential_key(new)), colon.end()
        elif credential is not None and match.start() == value_at and old:
            new = REDACTED if _credential(*credential, old) else redact_secrets(old)
        elif open_lists and open_lists[-1] is not None and _listed(open_lists[-1], old):
            new = REDACTED
        else:
            new = redact_secrets(old)
        if new != old:
            pieces += [text[done : match.start()], json.dumps(new, ensure_ascii=False)]
            done = match.end()
    return "".join([*pieces, text[done:]]) if pieces else text


def _credential(key: str, credential_named: bool, value: str) -> bool:
    """Whether a string under `key` is redacted whole: a credential-named key's value unless its
    shape says it is none (`known_value`), or a Docker config's `"auth"`."""
    if credential_named:
        return not known_value(key, value)
    return _docker_auth(key, value)


def _listed(plural: tuple[str, bool], element: Any) -> bool:
    """Whether an element of a list under a credential's plural name is redacted whole."""
    return isinstance(element, str) and bool(element) and listed_credential(*plural, element)


def _docker_auth(key: str, value: str) -> bool:
    """A Docker config's `"auth"`: the base64 of `user:password` (a topic is left alone)."""
    return key == "auth" and basic_credentials(value)


# Object keys are few and repeat on every call of a tool ("file_path", "content"); sanitizing
# one cost ~5 µs, mostly the literal tests, for the same answer each time.
_KEY_CACHE_MAX_CHARS = 100


def _key(key: str) -> tuple[str, bool]:
    """An object key sanitized, and whether it names a credential."""
    return _short_key(key) if len(key) <= _KEY_CACHE_MAX_CHARS else _sanitize_key(key)


def _sanitize_key(key: str) -> tuple[str, bool]:
    clean = sanitize_text(key)
    return clean, credential_key(clean)


def _credential_key(key: str) -> bool:
    """`credential_key`, remembered for a short key (a long one would hold its memory)."""
    return _credential_key_cache(key) if len(key) <= _KEY_CACHE_MAX_CHARS else credential_key(key)


# The same few keys again in every stored row a rescan reads (app/redaction.py).
_credential_key_cache = lru_cache(maxsize=4096)(credential_key)
_short_key = lru_cache(maxsize=4096)(_sanitize_key)


def json_depth(value: Any, *, limit: int = DEFAULT_MAX_DEPTH) -> int:
    """Nesting depth of a JSON value (a scalar is 0), counting no further than `limit + 1`."""
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list | tuple):
        items = value
    else:
        return 0
    if limit <= 0:
        return 1
    return 1 + max((json_depth(item, limit=limit - 1) for item in items), default=0)
