"""Lists under a credential's name in text: JSON's and a repr's, YAML's flow lists, TOML's and
INI's `name = [...]` (inline tables and comments too), and their hyperscan gates."""

from __future__ import annotations

import re
from functools import lru_cache

from app.privacy.common import (
    BLANK,
    GATE_BLANK,
    GATE_SPACE,
    LINE_BREAK_CHARS,
    REDACTED,
    _Rule,
)
from app.privacy.names import (
    _CREDENTIAL_VALUE,
    _CREDENTIAL_WORDS,
    _KEY_END_CHARS,
    _KEY_WORD,
    _SECRET_NAME_VALUE,
    _plain_word,
    credential_plural,
    listed_credential,
    passphrase,
)

# The ends of a credential's name as a list's name spells them, plural or singular (`apiKeys`,
# `PASSWORDS`, `credentials`, `password`), by the literal each begins with: one of the config
# rule's literals, or `redential`. A rule each, so that each pattern begins with its literal and
# Python's search skips to it: one alternation of them all was tried at every character of a
# text that the gate let in for a React Query `queryKey: [` (34 µs for 1.65 KB of TypeScript).
_PLURAL_STEMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    *(("assw", ("ord", "d")), ("ecret", ("",)), ("oken", ("",)), ("key", ("",))),
    *(("Key", ("",)), ("ssphrase", ("",)), ("pwd", ("",)), ("Pwd", ("",)), ("redential", ("",))),
    *(("ASSW", ("ORD", "D")), ("ECRET", ("",)), ("OKEN", ("",)), ("KEY", ("",))),
    *(("SSPHRASE", ("",)), ("PWD", ("",)), ("CREDENTIAL", ("",))),
)
# A scalar of a list as JSON, a Python repr or YAML's flow style writes it: a string (escapes
# and all), or a bare one (`3`, `null`, `None`, YAML's `hunter2` or `p@ss!`).
_LIST_SCALAR = (
    r"\"[^\"\\\n]*+(?:\\.[^\"\\\n]*+)*+\"|'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'|[^\s,\[\]{}\"'#]++"
)
# Any blank, a no-break space's too, and line breaks, around a name's `:` or `=`.
_LIST_SPACE = r"\s*+"
# Between a list's brackets, a comment may stand where a blank may, as Python, TOML and YAML
# allow (`api_keys = [  # prod` and `"k1",  # first` on the lines of a multi-line list: privacy26,
# generation 12 kept such a list in clear). A bare element holds no `#`, and a string holds its
# own, so a `#` outside them starts a comment, which ends at any line break (`LINE_BREAK_CHARS`).
# `//` (JavaScript, JSON5, C) and `--` before a blank (SQL, Lua) start one too: generation 13
# read `#` alone, and kept in clear the elements after `"k1", // prod`. `--x` is an option's
# name, a bare element.
_COMMENT = rf"(?:#|//|--(?!\S))[^{LINE_BREAK_CHARS}]*+"
_COMMENT_START = re.compile(r"#|//|--(?!\S)")
_LIST_GAP = rf"\s*+(?:{_COMMENT}\s*+)*+"
# An element, or a comment, as `_listed_credentials` reads a list's items one by one.
_LIST_ELEMENT_PATTERN = re.compile(rf"{_COMMENT}|{_LIST_SCALAR}")
# Where a list's first item starts: past brackets, blanks and comments.
_LIST_ITEMS_START = re.compile(rf"[\[\s]*+(?:{_COMMENT}[\[\s]*+)*+")


def _first_item(items: str) -> str:
    """A list's items from the first one's start (`_LIST_ITEMS_START`)."""
    start = _LIST_ITEMS_START.match(items)
    return items[start.end() :] if start else items


# An element: a scalar, or a list of scalars (`[["user", "hunter2"]]`: a list nested in a
# credential's list holds its credentials, as in JSON).
_LIST_ELEMENT = (
    rf"{_LIST_SCALAR}|\[{_LIST_GAP}(?:(?:{_LIST_SCALAR})"
    rf"(?:{_LIST_GAP},{_LIST_GAP}(?:{_LIST_SCALAR}))*+(?:{_LIST_GAP},)?{_LIST_GAP})?\]"
)
# A bare scalar as JSON or a repr writes one: a number, `null`, `None`, `true` (all the rule
# read before YAML's flow lists; a call or an expression is code's).
_JSON_BARE = re.compile(r"[\w.+\-]+")
# A list under a name ending in a credential's word, plural or singular (`"apiKeys": ["k1",
# "k2"]`, `"password": ["x"]`, YAML's `passwords: [a1, b2]`), found from the name's last word;
# the name's start is looked for behind it (`_listed_credentials`). Every repetition is
# possessive: an element is read once, and a list that does not close fails without trying
# shorter ones.
# Its items hold a string or a bare element with a digit or a symbol (or a nested list): a list
# of names (`keys: [a, b]`, `passwords: [str]`) is one `_listed_credentials` would leave, and
# failing here spares it a call of Python each (15,000 YAML lines of them took 19 ms, 1.6 ms at
# 23d5d19). The names before it are read possessively, so a list is still read once.
_LIST_NAME = r"[A-Za-z_.]++"
_LIST_ITEM = r"\[|\"|'|[A-Za-z_.]*+[^\s,\[\]{}\"'#A-Za-z_.]"
_LIST_REST = (
    rf"(?P<quote>[\"']?){_LIST_SPACE}(?P<sep>[:=]){_LIST_SPACE}\[{_LIST_GAP}"
    rf"(?P<items>(?:{_LIST_NAME}{_LIST_GAP},{_LIST_GAP})*+(?={_LIST_ITEM})(?:{_LIST_ELEMENT})"
    rf"(?:{_LIST_GAP},{_LIST_GAP}(?:{_LIST_ELEMENT}))*+)"
    # A trailing comma, as JavaScript, Python and JSON5 allow (`["k1",\n "k2",\n]`).
    rf"(?:{_LIST_GAP},)?{_LIST_GAP}\]"
)


def _stem(literal: str, ends: tuple[str, ...]) -> str:
    return literal + ("(?:" + "|".join(ends) + ")" if ends != ("",) else "")


# A list under a name ending in `key`, `Key` or `KEY` (an `s` after it aside) is a credential's
# only when the ASCII letter or digit nearest before that `key` is the one before `key` in a
# credential word (`apikey`, `secretkey`, ...): `credential_key` reads a name's ASCII letters
# and digits alone, lower-cased and joined (`_KEY_WORD`), and `key` alone names nothing. Between
# the two may stand only the name's other characters (`_name_before`'s `[\w.\-]`: `_`, `.`, `-`,
# a non-ASCII letter, whose UTF-8 bytes are \x80-\xff). So a bare `keys`, `primary_keys` or
# `"keys"` list selects no rule in a long text (`LIST_NAME_GATES`): a module of
# `keys = ['name', 'email']` lines ran the rule on each, ~3 µs a line (privacy25). Where the
# rule runs anyway (a short text takes every gate as found), such a list is let go before its
# name is read.
_KEY_STEM = "key"
_KEY_NAME_LETTERS = "".join(
    sorted({word[-len(_KEY_STEM) - 1] for word in _CREDENTIAL_WORDS if word.endswith(_KEY_STEM)})
)
_KEY_NAME_BEFORE = rf"[{_KEY_NAME_LETTERS}{_KEY_NAME_LETTERS.upper()}][_.\-\x80-\xff]*"
_KEY_NAME_LETTERS_CASED = frozenset(_KEY_NAME_LETTERS + _KEY_NAME_LETTERS.upper())
# Where the name's character nearest before its `key` (past at most two of `_`, `.`, `-`) is
# an ASCII one that no credential word has there (`keys` at a line's start, `primary_keys`,
# `foreign-keys`), the pattern itself fails, as `_listed_credentials` would let the list go: a
# module of `keys = [...]` lines that also held one credential's list (which the gate lets in)
# called that function once a line (18 ms for 15,000 lines, 0.6 ms without the credential's
# list). Past more separators the function decides, as before.
_KEY_NAME_NOT = rf"[^{_KEY_NAME_LETTERS}{_KEY_NAME_LETTERS.upper()}_.\-\x80-\U0010ffff]"


def _key_guard(literal: str) -> str:
    """Lookbehinds after a `key` literal that fail where `_listed_credentials` keeps the list."""
    return "".join(
        f"(?<!{before}{separators}{literal})"
        for before in (_KEY_NAME_NOT, "^")
        for separators in ("", r"[_.\-]", r"[_.\-]{2}")
    )


# The letters before `key` in each credential word ending in it (`api`, `secret`, `rivate`,
# `access`, `auth`, `igning`: six at most, a longer word's last six), any case.
_KEY_NAME_ENDS = tuple(
    sorted({word[: -len(_KEY_STEM)][-6:] for word in _CREDENTIAL_WORDS if word.endswith(_KEY_STEM)})
)
# What `_KEY_WORD` skips between a name's words: its separators and non-ASCII characters.
_KEY_NAME_SKIPPED = r"[_.\-\x80-\U0010ffff]"


def _key_name_end(literal: str) -> str:
    """A lookbehind after a `key` literal that holds where `credential_key` may find a
    credential word: one of `_KEY_NAME_ENDS` before it, past at most two skipped characters, or
    three skipped characters (past which `_listed_credentials` decides, as before). A name
    ending in another word (`sort_keys`, `hotkeys`, `monkeys`) fails here: generation 13 looked
    at the letter before `key` alone, whose `t` (`secretkey`'s) let every `sort_keys = [...]`
    line call Python once a credential's list let the rule run (70 ms for 15,000 lines)."""
    ends = [
        f"(?<=(?i:{end}){skipped}{literal})"
        for end in _KEY_NAME_ENDS
        for skipped in ("", _KEY_NAME_SKIPPED, _KEY_NAME_SKIPPED * 2)
    ]
    return "(?:" + "|".join([*ends, f"(?<={_KEY_NAME_SKIPPED * 3}{literal})"]) + ")"


_LIST_PATTERNS = [
    re.compile(
        f"(?P<listed>{_stem(literal, ends)}"
        + (_key_guard(literal) + _key_name_end(literal) if literal.lower() == _KEY_STEM else "")
        + f"[sS]?){_LIST_REST}"
    )
    for literal, ends in _PLURAL_STEMS
]
# YAML's flow list is one on a line of its own: an indent and a block list's `- ` before its
# name, a comment at most after it (a `passwords: [a1]` in a line of code is not YAML's).
# An indent may hold any Unicode blank (a no-break space's: generation 14 read spaces and tabs).
_YAML_BEFORE = re.compile(rf"{BLANK}*(?:-{BLANK}+)?")
# Before a TOML or INI key (`passwords = [...]`): an indent alone.
_ASSIGNED_BEFORE = re.compile(rf"{BLANK}*")
# Or JavaScript's declaration of it (`const tokens = [...];`, `export let`, `var`): generation 14
# read an indent alone before the name, and a blank or a comment alone after the list, and kept
# such a list in clear.
_DECLARED_BEFORE = re.compile(rf"{BLANK}*(?:(?:export{BLANK}+)?(?:const|let|var){BLANK}+)?")
# Or a TOML inline table's key (`db = { user = "app", passwords = ["hunter2x"] }`, privacy26:
# generation 12 kept it in clear): the table's name and `= {` on the line before it, perhaps
# other keys but no `}` outside their strings (a list after the table's end, `db = { x = 1 },
# keys = [...]`, is in a line of code; `user = 'a}b'` is a key's), and the table's `,` or `}`
# after the list, on its line or a later one (TOML 1.1's inline tables span lines). The search
# before the name is bounded by `_YAML_INDENT_CHARS`.
_INLINE_TABLE_BEFORE = re.compile(
    r"[ \t]*[\w.\-\"']+[ \t]*=[ \t]*\{(?:(?:\"[^\"\n]*+\"|'[^'\n]*+'|[^\n}\"'])*[,{])?[ \t]*"
)
_INLINE_TABLE_AFTER = re.compile(r"\s*+[,}]")
# Or the table's `{` ends a line above the list's (TOML 1.1's inline tables span lines: `db = {`,
# then `  api_keys = [...] }`; generation 13 kept the list in clear): that line as above, and
# between it and the list's line only other keys' lines of the table (a scalar each, no
# bracket or brace outside their strings), comments and blank lines. A `}` among them closes the
# table, a `[` is another list's line: the search stops there, so each list's costs at most the
# lines since the one before, within `_INLINE_TABLE_WINDOW` characters.
_INLINE_TABLE_OPEN = re.compile(_INLINE_TABLE_BEFORE.pattern + r"(?:#[^\n]*+)?\r?\n")
_INLINE_TABLE_LINES = re.compile(
    r"(?:[ \t]*+(?:#[^\n]*+|[\w.\-\"']++[ \t]*+=[ \t]*+"
    r"(?:\"[^\"\n]*+\"|'[^'\n]*+'|[^\n{}\[\]\"'#])*+(?:#[^\n]*+)?)?\r?\n)*+"
)
_INLINE_TABLE_WINDOW = 2000


def _inline_table_above(text: str, line: int) -> bool:
    """Whether the line at `line` is in a TOML inline table opened on a line above it
    (`_INLINE_TABLE_OPEN`), with only the table's other keys' lines between."""
    low = max(0, line - _INLINE_TABLE_WINDOW)
    brace = text.rfind("{", low, line)
    if brace < 0:
        return False
    # The opening line's start within the window too: unbounded, a text of lists with no `\n`
    # (lines broken by `\r` or U+2028, which `_INLINE_TABLE_OPEN` does not end a line at) or
    # after a megabyte's line re-read it from its start for each list (13 s for a megabyte).
    opening = text.rfind("\n", low, brace) + 1
    if opening == 0 and low > 0:
        return False
    opened = _INLINE_TABLE_OPEN.match(text, opening, line)
    if opened is None:
        return False
    between = _INLINE_TABLE_LINES.match(text, opened.end(), line)
    return between is not None and between.end() == line


# A comment's `#` is enough: the rest of its line is not read (for each of a line's lists).
_YAML_AFTER = re.compile(rf"{BLANK}*+(?:[{LINE_BREAK_CHARS}]|\Z)|{BLANK}++#")
# After an assigned list: a statement's `;` may end it, and a `#` or `//` comment follow.
_ASSIGNED_AFTER = re.compile(rf"{BLANK}*+;?+{BLANK}*+(?:[{LINE_BREAK_CHARS}]|\Z|#|//)")
# How far before a name its line's start is looked for: an indent is shorter, and each of a
# megabyte's lists costs a bounded search, not the line's.
_YAML_INDENT_CHARS = 100
# What the config rule leaves of a bare value as code's: a number or a version, a dotted name.
_CODE_VALUE = re.compile(r"[-+]?v?\d+(?:\.\d+)*|(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*")
_BARE_CREDENTIAL = re.compile(_CREDENTIAL_VALUE)


# What a list's element names rather than holds, in config and code (rev-privacy22): an option
# (`-p`, `--password`), a reference (`${PASSWORD}`, `$TOKEN`, `%KEY%`), a rule, scope or prefixed
# name of words with a number at most (`min:8`, `read:pets`, `env:OPENAI_API_KEY`), a resource's
# path of lower-case words (`kube-system/my-secret`), a URL without a user (the URL rule redacts
# one's password before), an e-mail address, or a mask (`sk-...`, `ghp_***`).
# Narrower than it looks on purpose (rev-mends22): a digit is allowed only in a validation rule's
# bound (`min:8`, not `pass:1234`), a path and a URL hold none in the path and no query
# (`p4ss/w0rd`, `ftp://x/y?pw=hunter2` are judged as values), and a mask is a short prefix and
# the mask alone (`sk-...`, not `hunter2...`).
_NAMED_VALUE = re.compile(
    r"--?[A-Za-z][\w\-]*"
    r"|\$\{?[A-Za-z_][\w.]*\}?|%[A-Za-z_]\w*%"
    r"|[A-Za-z_][A-Za-z_\-]*(?::[A-Za-z_][A-Za-z_\-.]*)+"
    r"|(?:min|max|size|length|len|digits|between|gt|gte|lt|lte)(?::[0-9]{1,4}(?:,[0-9]{1,4})?)"
    r"|[a-z][a-z.\-]*(?:/[a-z][a-z.\-]*)+"
    r"|[a-z][a-z0-9+.\-]*://[^\s@?#]*"
    r"|[\w.+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+"
    r"|[A-Za-z_\-]{0,12}(?:\.{3}|\u2026|\*{3,})"
)


def _yaml_credential(singular: str, value: str) -> bool:
    """Whether a bare element of a YAML flow list under a credential's name is one, as the
    config rule judges a bare value (`password: hunter2`): a character no identifier holds, and
    not a number, a dotted name or a name (`_NAMED_VALUE`: `env:OPENAI_API_KEY`, an OpenAPI
    scope's `read:pets`). A plain word is kept under a plural as under a singular: a list of
    them names providers, places or roles (`api_keys: [primary, secondary]`, `[openai,
    anthropic]`, `[header, query]`) far more often than it holds passwords. Under `secrets` a
    Secret's name is as usual as a value (Kubernetes' `imagePullSecrets: [regcred]`, Compose's
    `secrets: [db-password]`): words joined by `-` or `.`."""
    if _CODE_VALUE.fullmatch(value) or _plain_word(value) or _NAMED_VALUE.fullmatch(value):
        return False
    if _KEY_WORD.findall(singular[-_KEY_END_CHARS:])[-1:] in (["secret"], ["Secret"]) and (
        _SECRET_NAME_VALUE.fullmatch(value)
    ):
        return False
    return _BARE_CREDENTIAL.fullmatch(value) is not None


# A word of an identifier's characters (`set_git_credential`, `self.token`): a module's or a
# function's name as a list in code holds them (huggingface_hub's `"_git_credential": [...]`).
_IDENTIFIER_VALUE = re.compile(r"[A-Za-z_][A-Za-z_.]*")


def _singular_listed(value: str) -> bool:
    """Whether an element without a blank, in a list under a credential's singular name in
    text, is one: a digit or a symbol, not a number, a version, an identifier or a name
    (`_NAMED_VALUE`). A singular's list in code and config names things
    (`"_git_credential": ["set_git_credential"]`, a role's `"secret": ["get", "list"]`,
    `"api_key": ["header", "query"]`, `"password": ["required", "min:8"]`); a plural's holds
    values."""
    return (
        _CODE_VALUE.fullmatch(value) is None
        and _IDENTIFIER_VALUE.fullmatch(value) is None
        and _NAMED_VALUE.fullmatch(value) is None
    )


# `_NAME_BEFORE` read backwards from the name's end: its search from 100 characters before
# tried every one of them (17 µs a list in TypeScript's `useQuery({ queryKey: [...] })`).
_NAME_CHARS = re.compile(r"[\w.\-]*")
# A list's items that hold no string and no bare element with a digit or a symbol.
_NAMES_ONLY = re.compile(r"[A-Za-z_.,\s\[\]]*+")


_NAME_BEFORE_CHARS = 100

# A line's characters, read backwards from a name to the line break before it (any of
# `LINE_BREAK_CHARS`: `x = 1\u2028api_keys = [...]` is a line of its own, as after `\n`).
_LINE_CHARS = re.compile(rf"[^{LINE_BREAK_CHARS}]*")


def _line_start(text: str, name_start: int) -> tuple[int, bool]:
    """Where the line holding `name_start` starts, and whether that start was found within
    `_YAML_INDENT_CHARS` characters (a break there, or the text's start)."""
    low = max(0, name_start - _YAML_INDENT_CHARS)
    window = text[low:name_start][::-1]
    found = _LINE_CHARS.match(window)
    length = found.end() if found else 0
    return name_start - length, length < len(window) or low == 0


def _name_before(text: str, end: int) -> str:
    """The identifier's characters right before `end`, 100 at most: what `_NAME_BEFORE` finds."""
    window = text[max(0, end - _NAME_BEFORE_CHARS) : end][::-1]
    found = _NAME_CHARS.match(window)
    length = found.end() if found else 0
    return text[end - length : end]


# A list's names repeat down a file (`keys = [...]` on each of a module's lines, where the
# assigned lists' gate runs the rule): judged once each, a line of them cost 4.6 µs, a third of
# it `credential_key`'s splitting twice. JSON's keys repeat in every stored row a rescan reads
# (app/privacy/engine.py): one cache for both. A long name is judged each time, so that an
# attacker's megabyte key is not held.
_PLURAL_NAME_CACHE_CHARS = 100
_plural_names = lru_cache(maxsize=4096)(credential_plural)


def plural_name(name: str) -> tuple[str, bool] | None:
    """`credential_plural`, remembered for a short name."""
    if len(name) <= _PLURAL_NAME_CACHE_CHARS:
        return _plural_names(name)
    return credential_plural(name)


# What every element of `_TOKEN_SHAPE` holds: 16 characters without a blank, or 10 of
# letters, digits, `_` and `-`; an element is a part of its list's items, so items without
# such a run hold none.
_TOKEN_RUN = re.compile(r"\S{16}|[A-Za-z0-9_\-]{10}")

_KEY_PATTERNS = frozenset(
    pattern
    for (literal, _), pattern in zip(_PLURAL_STEMS, _LIST_PATTERNS, strict=True)
    if literal.lower() == _KEY_STEM
)
# By identity: a pattern's hash is computed anew each time, over its compiled code (~1.8 µs).
_KEY_PATTERN_IDS = frozenset(map(id, _KEY_PATTERNS))


def _listed_credentials(match: re.Match[str]) -> str:
    """A list under a credential's name in text: each string element that the JSON rule
    redacts in an object (`credential_plural`, `listed_credential`) redacted alike, one with a
    blank only if it is a passphrase (text's lists are code's as often: `"password": ["This
    field is required."]`); in YAML's flow style, a bare element too (`_yaml_credential`). TOML's
    and INI's `name = [...]` (privacy24) as a quoted name's list: on lines of its own (a
    multi-line array too), strings and JSON's bare scalars alone, a string first."""
    start = match.start()
    text = match.string
    if id(match.re) in _KEY_PATTERN_IDS:
        # The name's character nearest before its `key` that `_KEY_WORD` reads, if it is ASCII.
        last = text[max(0, start - _NAME_BEFORE_CHARS) : start].rstrip("_.-")[-1:]
        if last.isascii() and last not in _KEY_NAME_LETTERS_CASED:
            return match.group()
    items = match.group("items")
    quote = match.group("quote")
    assigned = match.group("sep") == "="
    strings = bool(quote) or assigned
    # Only a string or, in YAML, a bare element with a digit or a symbol is ever redacted: a
    # list of names is let go before its name is read (`keys: [a, b]` 15,000 times took 70 ms).
    if not items or (
        "'" not in items and '"' not in items and (strings or _NAMES_ONLY.fullmatch(items))
    ):
        return match.group()
    # What the gate asks of an assigned list (`LIST_GATES`).
    if assigned and _first_item(items)[:1] not in ("'", '"'):
        return match.group()
    stem = _name_before(text, start)
    name = stem + match.group("listed")
    listed = plural_name(name)
    # Under `tokens` alone or a word making no credential of them (`max_tokens`,
    # `special_tokens`) only an element of a token's shape is one: a list holding no run of
    # its length is let go before its line is read and each element judged (~13 µs a line).
    if listed is None or (listed[1] and _TOKEN_RUN.search(items) is None):
        return match.group()
    opening = start - len(stem) - 1
    if quote and (opening < 0 or text[opening] != quote):
        return match.group()
    if not quote or assigned:
        name_start = start - len(stem) - (1 if quote else 0)
        line, at_line = _line_start(text, name_start)
        before, after = (
            (_DECLARED_BEFORE, _ASSIGNED_AFTER) if assigned else (_YAML_BEFORE, _YAML_AFTER)
        )
        own_line = (
            (assigned or "\n" not in match.group())
            and at_line
            and before.fullmatch(text, line, name_start) is not None
            and after.match(text, match.end()) is not None
        )
        in_table = (
            assigned
            and at_line
            and not own_line
            and _INLINE_TABLE_AFTER.match(text, match.end()) is not None
            and (
                _INLINE_TABLE_BEFORE.fullmatch(text, line, name_start) is not None
                or (
                    _ASSIGNED_BEFORE.fullmatch(text, line, name_start) is not None
                    and _inline_table_above(text, line)
                )
            )
        )
        if not (own_line or in_table):
            return match.group()
    singular = listed[0]
    named_singular = singular == stem + match.group("listed")
    # A JSON or repr list with a call or an expression in it is code's, as before YAML's bare
    # elements widened the pattern (`["k1", f(x)]`).
    if strings and not all(
        found[0] in ("'", '"') or _COMMENT_START.match(found) or _JSON_BARE.fullmatch(found)
        for found in _LIST_ELEMENT_PATTERN.findall(items)
    ):
        return match.group()

    def element(found: re.Match[str]) -> str:
        scalar = found.group()
        if _COMMENT_START.match(scalar):
            return scalar
        if scalar[0] not in ("'", '"'):
            redacted = (
                not strings
                and listed_credential(*listed, scalar)
                and _yaml_credential(singular, scalar)
                and (not named_singular or _singular_listed(scalar))
            )
            return REDACTED if redacted else scalar
        value = scalar[1:-1]
        if not value or not listed_credential(*listed, value):
            return scalar
        if any(char.isspace() for char in value):
            redacted = passphrase(singular, value)
        else:
            redacted = not named_singular or _singular_listed(value)
        return f"{scalar[0]}{REDACTED}{scalar[0]}" if redacted else scalar

    whole = match.group()
    head, tail = match.start("items") - start, match.end("items") - start
    return whole[:head] + _LIST_ELEMENT_PATTERN.sub(element, items) + whole[tail:]


LIST_RULES: list[_Rule] = [
    ((literal,), pattern, _listed_credentials)
    for (literal, _), pattern in zip(_PLURAL_STEMS, _LIST_PATTERNS, strict=True)
]
# Hyperscan gates (app/privacy/engine.py): the option's name and a value's first byte; a listed
# credential's name's end and `: [`.
# hyperscan 0.9.1 missed ~half of the long texts' `pwds: ['hunter2', 'x1']` lines that `re`
# matches with this end after `pwd`'s list (in the privacy rules' database; alone it matched):
# the `pwd` names' gate stops at the list's first string or symbol, and the rule decides.
_YAML_LIST_END = rf"[^\n]*\]{GATE_BLANK}*(?:[\x0a-\x0d\x1c-\x1e\x80-\xff]|#|$)"
# Each list rule's gate, its branches apart (tests/test_privacy_gen8_gates.py reaches each one).
LIST_GATE_BRANCHES: dict[re.Pattern[str], tuple[str, ...]] = {
    pattern: (
        # A quoted name's list.
        rf"{_stem(literal, ends)}[sS]?[\"']{GATE_SPACE}*:{GATE_SPACE}*\["
        r"[\t\n\r ,A-Za-z_.]*[^\t\n\r ,A-Za-z_.\]]",
        # YAML's flow list.
        rf"{_stem(literal, ends)}[sS]?[\r{GATE_BLANK[1:-1]}]*:[\r{GATE_BLANK[1:-1]}]*\["
        r"[\t\r ,A-Za-z_.]*[^\t\n\r ,A-Za-z_.\]]"
        + ("" if literal.lower() == "pwd" else _YAML_LIST_END),
        # TOML's and INI's `name = [` and a string (privacy24).
        # A comment before the first string (privacy26) lets the rule run at its `#`: read to
        # its line's end, the gate left hyperscan missing other branches' lists in long texts.
        rf"{_stem(literal, ends)}[sS]?[\"']?{GATE_SPACE}*={GATE_SPACE}*\["
        rf"[\[{GATE_SPACE[1:-1]}]*[\"'#/\-]",
    )
    for (literal, ends), pattern in zip(_PLURAL_STEMS, _LIST_PATTERNS, strict=True)
}

LIST_GATES: dict[re.Pattern[str], str] = {
    # The stems whole: with their last two letters only, the name's `s` and quote optional
    # left `:` as the literal hyperscan confirms from, and its scan took twice as long. A list
    # that `_listed_credentials` reads: under a quoted name, or ending its line (YAML's), and
    # holding a string or a bare element with a digit or a symbol past the names before it
    # (`_LIST_ITEM`). A line of code's `queryKey: [...],` (React Query) let the rule run on every
    # TypeScript chunk holding one (13.3 µs for 1.65 KB, 4.5 µs at 23d5d19), a YAML file of
    # `keys: [a, b]` on each of its lines. The literal first: a line's start before the name
    # (`(?:^|\n)[\t ]*…Key`) made hyperscan run its automaton over every line.
    **{pattern: "|".join(branches) for pattern, branches in LIST_GATE_BRANCHES.items()},
}

# The scan's gates for the `key` names' rules (app/privacy/engine.py), narrower than the ones
# above (`_KEY_NAME_LETTERS`): the output is the same as with these, so the rules' digest
# (version.py) records these, and no stored row is rescanned for the narrowing.
LIST_NAME_GATES: dict[re.Pattern[str], str] = {
    pattern: _KEY_NAME_BEFORE + "(?:" + "|".join(LIST_GATE_BRANCHES[pattern]) + ")"
    for pattern in _LIST_PATTERNS
    if pattern in _KEY_PATTERNS
}
