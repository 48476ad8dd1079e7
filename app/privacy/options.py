"""A command line's `--password value` and `--api-key=value` options."""

from __future__ import annotations

import re

from app.privacy.common import _NOT_REDACTED, REDACTED, _Rule
from app.privacy.names import (
    _OPTION_PLACEHOLDER,
    _plain_word,
    credential_key,
    known_value,
    plain_credential,
)

# The words of a sentence that may follow an option's name where prose names it (`the --token
# flag`, `--password option`): not its value. Shorter words are no plain credential anyway.
_PROSE_WORDS = frozenset(
    {
        *("flag", "flags", "option", "options", "argument", "arguments", "param", "parameter"),
        *("parameters", "value", "values", "switch", "field", "setting", "variable", "instead"),
        *("only", "must", "should", "will", "with", "when", "which", "that", "this", "then"),
        *("from", "also", "here", "there", "first", "after", "before", "unless", "while"),
        *("where", "since", "because", "both", "either", "into", "onto", "over", "once"),
        *("requires", "needs", "expects", "takes", "accepts", "given", "provided"),
    }
)


def _option_credential(match: re.Match[str]) -> str:
    """`--password swordfish`, `--api-key 'x'`: the value redacted unless the option names no
    credential (`credential_key`; `--no-password` takes none), or the value is no credential by
    its shape (`known_value`), a help text's placeholder, or a plain word that a placeholder,
    an identifier or a sentence's word is (`plain_credential`, `_PROSE_WORDS`)."""
    name = match.group("name")
    value = match.group("value")
    quote = value[0] if value[0] in ("'", '"') else ""
    bare = value[1:-1] if quote else value
    kept = (
        name.startswith(("no-", "no_"))
        or not bare
        or not credential_key(name)
        or known_value(name, bare)
        or _OPTION_PLACEHOLDER.fullmatch(bare) is not None
        or (
            _plain_word(bare) and (not plain_credential(name, bare) or bare.lower() in _PROSE_WORDS)
        )
    )
    if kept:
        return match.group()
    return f"{match.group('keep')}{quote}{REDACTED}{quote}"


# The ends of an option's name that `credential_key` may judge a credential's, one lookbehind
# each (a lookbehind's width is fixed), in lower case and in capitals (`--API-TOKEN`), `pass`
# after a `-` or a `_` (`--db-pass`, `--db_pass`).
_OPTION_ENDS = (
    *("password", "passwd", "passphrase", "token", "secret", "key", "-pass", "_pass", "pwd"),
    *("PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN", "SECRET", "KEY", "-PASS", "_PASS", "PWD"),
)
# `--name value` or `--name=value` after a blank, a quote or the text's start (not `a--b`,
# `---`); the name's words joined by `-` or `_` (`--api-key`, `--api_token`): possessive, so
# each `--` costs one pass over its word.
_OPTION_PATTERN = re.compile(
    r"(?P<keep>--(?<![\w\-]--)(?P<name>[A-Za-z0-9]++(?:[-_][A-Za-z0-9]++)*+)"
    + "(?:"
    + "|".join(f"(?<={end})" for end in _OPTION_ENDS)
    + r")(?:[ \t]++|=))"
    + _NOT_REDACTED
    + r"(?![-$<{%])(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s\"'`;|&()<>]+)"
)
OPTION_RULES: list[_Rule] = [
    # The config rule's literals (no more for the scanner to find): each end holds one.
    (
        (*("assw", "ssphrase", "oken", "ecret", "key", "-pass", "_pass", "pwd"),)
        + ("ASSW", "SSPHRASE", "OKEN", "ECRET", "KEY", "-PASS", "_PASS", "PWD"),
        _OPTION_PATTERN,
        _option_credential,
    )
]

# Its hyperscan gate (app/privacy/engine.py): the option's name and a value's first byte.
OPTION_GATES: dict[re.Pattern[str], str] = {
    _OPTION_PATTERN: (
        "--[A-Za-z0-9_-]*(?:" + "|".join(_OPTION_ENDS) + r")(?:[\t ]+|=)[^\x09-\x0d\x20]"
    ),
}
