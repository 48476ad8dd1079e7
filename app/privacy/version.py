"""The rules' version: a digest of everything that decides what the rules leave."""

from __future__ import annotations

import hashlib
import re
from types import FunctionType

from app.privacy.assignments import (
    _F_STRING_REFERENCES,
    _INI_HEADER,
    _INI_LINES,
    _INI_WINDOW,
    _PROSE_LINE,
    _TEMPLATE_PREFIX,
)
from app.privacy.commands import _COMMAND_HEAD, _SHELL_SEPARATOR
from app.privacy.connections import _QUERY_WORDS
from app.privacy.engine import _RULE_GATES, _RULES
from app.privacy.lists import (
    _ASSIGNED_AFTER,
    _ASSIGNED_BEFORE,
    _BARE_CREDENTIAL,
    _CODE_VALUE,
    _COMMENT_START,
    _DECLARED_BEFORE,
    _IDENTIFIER_VALUE,
    _INLINE_TABLE_AFTER,
    _INLINE_TABLE_BEFORE,
    _INLINE_TABLE_LINES,
    _INLINE_TABLE_OPEN,
    _INLINE_TABLE_WINDOW,
    _JSON_BARE,
    _LIST_ELEMENT_PATTERN,
    _LIST_ITEMS_START,
    _NAMED_VALUE,
    _YAML_AFTER,
    _YAML_BEFORE,
    _YAML_INDENT_CHARS,
)
from app.privacy.names import (
    _ALGORITHM_VALUE,
    _BASE64_PART,
    _CAMEL,
    _CREDENTIAL_WORDS,
    _CURSOR_VALUE,
    _FILE_EXTENSION,
    _FLAG_VALUES,
    _FLAG_WORDS,
    _IDENTIFIER_NUMBERS,
    _IDENTIFIER_SHORT_WORDS,
    _IDENTIFIER_WORD_CHARS,
    _KEY_END_CHARS,
    _KEY_FILE_WORDS,
    _KEY_WORD,
    _LABEL_COMPANION_WORDS,
    _LABEL_MAX_WORDS,
    _LABEL_WORDS,
    _MASKED_VALUE,
    _NAME_BEFORE,
    _NOT_CREDENTIAL_PASSES,
    _NOT_CREDENTIAL_TOKENS,
    _OPTION_PLACEHOLDER,
    _PASS_COUNT,
    _PASSPHRASE,
    _PATH_VALUE,
    _PLACEHOLDER_NAMES,
    _PLACEHOLDER_SPLIT,
    _PLACEHOLDER_VALUE,
    _PLACEHOLDER_WORDS,
    _PLAIN_MIN_CHARS,
    _PROGRESS_VALUE,
    _REFERENCE_NAME,
    _SECRET_KEY_VALUE,
    _SECRET_NAME_VALUE,
    _SENTENCE_WORDS,
    _SHORT_CREDENTIAL_WORDS,
    _SHORT_TOKEN,
    _SPECIAL_TOKEN_VALUE,
    _STATUS_WORDS,
    _TOKEN_SHAPE,
)
from app.privacy.options import _PROSE_WORDS
from app.privacy.private import _MEMORY, _MEMORY_LITERALS, _PRIVATE_LITERALS, _PRIVATE_TAG
from app.privacy.tokens import _ENCODED_HEADER_CHARS, _PRIVATE_KEY_HEADER

# Bump when code that decides what the rules leave changes (a replacement's body, _at_command,
# basic_credentials, credential_key, known_value, credential_plural, listed_credential, how
# literals and gates select rules): the digest below sees only data. 3: JSON keys split into
# camelCase words (privacy18; a value's shape decides for special tokens, progress ids and flags
# since fixprivacy18, before generation 3 shipped).
# 4: short credential words (`pwd`, `pass`), a list under a credential's plural name, a working
# directory under `pwd` (privacy19); a path only under the names that expect one, a key's file or
# a working directory (`expected_path`), algorithms' names, a count or a compiler's pass under
# `pass` (fixprivacy19, before generation 4 shipped).
# 5: a plain word under a credential's name in text (`plain_credential`), `--name value` options,
# lists under a credential's plural in text, a compiler's pass and a masked value (`****`) kept
# in text as in JSON (privacy20); a plain word assigned as code (` = `), a capitalised one after
# `:` and a status word kept (`_plain_kept`), a mask of one character, `--api_token` options,
# a list's trailing comma, `--no_password` (fixprivacy20, before generation 5 shipped).
# 6: a plain word under a password's name in an INI section, a plain word between a connection
# string's keys, URL query parameters, placeholders kept (`your_api_key`, `<your-api-key>`),
# options in capitals and `_pass` (privacy21); a capitalised word kept outside an INI section,
# placeholders of the name's words only, a `<…>` value whole, paging cursors kept in a query, a
# list under a singular credential's name (fixprivacy21, before generation 6 shipped).
# 7: a quoted passphrase (`password: "correct horse"`, `passphrase`), a list under a credential's
# singular in text, YAML's flow lists (`_yaml_credential`), a list nested in a credential's list
# in JSON and text; a text list's element with a blank only if a passphrase (privacy22).
# 8: a phrase holding an algorithm's name is no passphrase (privacy23).
# 9: a phrase of four words or more holding a label word is a passphrase unless its other words
# are a label's; TOML's and INI's `name = [...]` lists (privacy24).
# 10: a short token of a random token's kinds under `tokens` kept when it reads as an
# identifier (`_identifier`: `Uint8Array`, `OAuth2Client`; fixprivacy24).
# 11: a triple-quoted value keeps its delimiters (`_assignment`) and is judged without them and
# the newlines around it (`_credential_assignment`; privacy25b).
# 12: a string's prefix and an f-string of references (`_assignment`, `_credential_assignment`),
# a padded value judged as the word inside its blanks, a key's lines joined (lines of a word of
# letters each judged as a phrase, fixprivacy26), comments skipped
# among a list's elements and a TOML inline table's list read (`_listed_credentials`; privacy26).
# 13: a value's padding stripped is any Unicode blank, not only spaces and tabs; a separator
# of Unicode blanks spaces code as one of spaces does (`_plain_kept`; privacy27).
# 14: JavaScript's declared lists (`const tokens = [...];`) read in `_listed_credentials`;
# `_at_command`'s patterns in the digest (privacy28).
_RULES_CODE_VERSION = 14


def _described(value: object) -> str:
    """What of a rule's pattern or replacement decides its output, as text."""
    if isinstance(value, re.Pattern):
        return f"{value.pattern!r}/{value.flags}"
    if isinstance(value, FunctionType):
        # Its name and what it closes over (`_keep_group("keep")`); its body is code.
        bound = [_described(cell.cell_contents) for cell in value.__closure__ or ()]
        # Which module of the package holds it is layout, not behaviour: named as when the
        # package was one module, so that moving a rule between files re-chunks nothing.
        module = "app.privacy" if value.__module__.startswith("app.privacy.") else value.__module__
        return f"{module}.{value.__qualname__}{bound}"
    return repr(value)


def _rules_version() -> str:
    parts = [repr(_RULES_CODE_VERSION)]
    for literals, pattern, replacement in _RULES:
        gate = _RULE_GATES.get(pattern, "")
        parts += [repr(literals), _described(pattern), _described(replacement), gate]
    parts += [
        _described(pattern)
        for pattern in (
            _KEY_WORD,
            _REFERENCE_NAME,
            _SECRET_NAME_VALUE,
            _SECRET_KEY_VALUE,
            _CURSOR_VALUE,
            _SPECIAL_TOKEN_VALUE,
            _PROGRESS_VALUE,
            _NAME_BEFORE,
            _TOKEN_SHAPE,
            _SHORT_TOKEN,
            _PATH_VALUE,
            _BASE64_PART,
            _FILE_EXTENSION,
            _ALGORITHM_VALUE,
            _PASS_COUNT,
            _MASKED_VALUE,
            _PLACEHOLDER_VALUE,
            _PLACEHOLDER_SPLIT,
            _INI_HEADER,
            _INI_LINES,
            _CAMEL,
            _OPTION_PLACEHOLDER,
            _LIST_ELEMENT_PATTERN,
            _JSON_BARE,
            _YAML_BEFORE,
            _YAML_AFTER,
            _ASSIGNED_BEFORE,
            _DECLARED_BEFORE,
            _ASSIGNED_AFTER,
            _INLINE_TABLE_BEFORE,
            _INLINE_TABLE_AFTER,
            _INLINE_TABLE_OPEN,
            _INLINE_TABLE_LINES,
            _LIST_ITEMS_START,
            _F_STRING_REFERENCES,
            _PROSE_LINE,
            _CODE_VALUE,
            _COMMENT_START,
            _BARE_CREDENTIAL,
            _PASSPHRASE,
            _IDENTIFIER_VALUE,
            _NAMED_VALUE,
            _PRIVATE_TAG,
            _MEMORY,
            _COMMAND_HEAD,
            _SHELL_SEPARATOR,
            _PRIVATE_KEY_HEADER,
        )
    ]
    parts += [repr(_ENCODED_HEADER_CHARS)]
    parts += [repr(_PRIVATE_LITERALS), repr(_MEMORY_LITERALS), repr(sorted(_CREDENTIAL_WORDS))]
    parts += [repr(sorted(_NOT_CREDENTIAL_TOKENS)), repr(sorted(_FLAG_WORDS))]
    parts += [repr(sorted(_FLAG_VALUES)), repr(_KEY_END_CHARS)]
    parts += [repr(sorted(_SHORT_CREDENTIAL_WORDS)), repr(sorted(_KEY_FILE_WORDS))]
    parts += [repr(sorted(_NOT_CREDENTIAL_PASSES))]
    parts += [repr(sorted(_PLACEHOLDER_WORDS)), repr(sorted(_PROSE_WORDS)), repr(_PLAIN_MIN_CHARS)]
    parts += [repr(sorted(_STATUS_WORDS))]
    parts += [repr(_INI_WINDOW), repr(sorted(_PLACEHOLDER_NAMES)), repr(sorted(_QUERY_WORDS))]
    parts += [repr(sorted(_SENTENCE_WORDS)), repr(_YAML_INDENT_CHARS)]
    parts += [repr(sorted(_LABEL_WORDS))]
    parts += [repr(sorted(_LABEL_COMPANION_WORDS)), repr(_LABEL_MAX_WORDS)]
    parts += [repr((_IDENTIFIER_WORD_CHARS, _IDENTIFIER_SHORT_WORDS, _IDENTIFIER_NUMBERS))]
    parts += [repr(sorted(_TEMPLATE_PREFIX)), repr(_INLINE_TABLE_WINDOW)]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


# What a memory file's chunks were sanitized under (`memory_files.rules`): a sync re-chunks a file
# indexed under other rules, unchanged or not, so that a rule added since reaches its chunks.
# Derived from the rules themselves (patterns and flags, literals, gates, replacements), so that
# no change of a rule's data can forget to move it; a change of code bumps _RULES_CODE_VERSION.
RULES_VERSION = _rules_version()

# Grows by one with every change of RULES_VERSION (tests/test_privacy.py pins each generation's
# digest, so that a rules change cannot forget it): the order of the rules' versions, which a
# digest has not. A worker rescans the stored rows only when they were redacted under an older
# generation, so that two builds on one database (a rolling upgrade, a dev checkout beside an
# installed agmem) do not redo the pass against each other (app/worker/rescan.py).
# 8 (privacy23): the list rules' gate and pattern narrowed to the lists they redact in (a quoted
# name's or a YAML line's; a string or a bare element with a digit or a symbol); a phrase holding
# a password's label in another language (`_LABEL_WORDS`) or an algorithm's name is no passphrase.
# 9 (fixprivacy23): the `pwd` names' list gate without the YAML list's end, which hyperscan
# missed in long texts; `_LABEL_WORDS` narrowed to the words naming a password or a passphrase.
# 10 (privacy24): a passphrase holding a label word (`casa parola verde sole`) redacted unless a
# label's length or words; TOML's and INI's `name = [...]` lists under a credential's name; a
# random token of 10 to 15 characters in a `tokens` list.
# 11 (fixprivacy24): such a token kept when it reads as an identifier (`Uint8Array`,
# `OAuth2Client`: a JavaScript tokenizer's output, which generation 10 redacted).
# 12 (privacy25b): a TOML (or Python) triple-quoted string under a credential's name, on one
# line or alone between the delimiters' lines (`password = """hunter2x"""`; `password = '''`,
# `hunter2x` and `'''` on three lines), redacted as the value in one pair of quotes is; in
# capitals (`PASSWORD = """…"""`) the `.env` rule had redacted the empty `""` its delimiter opens
# with and kept the password.
# 13 (privacy26): what generation 12 kept readable under a credential's name: a triple-quoted
# value holding a quote (`"""ab"cd"""`), padded with blanks, of a key's lines (a word on each),
# or in capitals of fewer than four characters (`PASSWORD = """abc"""` had become `PASSWORD =
# "[REDACTED]""abc"""`); a prefixed string (`r"…"`, `b"…"`, `f"…"`, `rb"…"`; an f-string of
# references alone kept); a value padded with blanks in one pair of quotes; a credential's list
# in a TOML inline table or with comments among its lines. The `key` names' list patterns fail
# by themselves where the rule let the list go (the same output, cheaper).
# 14 (privacy27): what generation 13 kept readable near the shapes it redacts: an escaped single
# quote in a `.env` value (`PASSWORD='ab\'cd1234'` showed `cd1234`); Python 3.14's template
# strings (`t"…"`, `tr"…"`) read as f-strings are; a key's body after `"""  \` (blanks before
# the continuation); a no-break space or another Unicode space padding a name's `:` or `=` or a
# quoted value; `\v`, `\f`, `\r` alone, NEL, U+2028 and U+2029 ending a line as `\n` does;
# `//` and `--` comments among a credential's list's lines, as `#` ones; a TOML inline table's
# list whose `{` ends a line above it (fixprivacy27, before generation 14 shipped: that line's
# start within the 2,000 characters its `{` is looked for in, as docs/capture.md says; a longer
# opening line had been read from its start for each list, 13 s for a megabyte). Faster, the
# same output but for names no one writes (`a_pi_keys`): an unclosed triple quote before a
# key's lines (`_TRIPLE_CLOSES`), a `key` name's list pattern failing unless a credential word's
# letters end before its `key`; the unquoted rule after another line break than `\n` a rule of
# its own (`_CONFIG_AFTER_BREAK`).
# 15 (privacy28): what generation 14 kept readable near the shapes it redacts: a Unicode blank
# (a no-break space's) in the indent, a list's `- ` or `export ` before an unquoted value's or a
# list's name (`\u00a0password: hunter2x9`); JavaScript's declared lists (`const tokens =
# ['…', // ci`: `const`, `let`, `var` before the name, a `;` after the list); a client's
# password option after another line break than `\n` (`ls\u2028mysql -phunter2`). And less:
# a `.env` value's `\'` before a word's end closes it, as a shell reads it (`PASSWORD='abc\' ;
# echo 'hi'` had lost `; echo ` to the redaction); a private key in base64 (kubeconfig's
# `client-key-data`); curl's `-u user:password`; GitLab's `PRIVATE-TOKEN` header; npm's
# `npm_…` tokens.
RULES_GENERATION = 15
