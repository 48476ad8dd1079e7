"""Credentials in connection and query strings, and registry configs: `--password=`, a
connection string's `Password=`, a URL query's `?token=`, `.npmrc`'s `:_authToken=`, Azure's
`AccountKey=`."""

from __future__ import annotations

import re

from app.privacy.common import _NOT_A_REFERENCE, _NOT_REDACTED, REDACTED, _keep_group, _Rule
from app.privacy.names import (
    _CREDENTIAL_VALUE,
    _OPTION_PLACEHOLDER,
    _cursor_name,
    _plain_word,
    credential_key,
    known_value,
    plain_credential,
)

REGISTRY_RULES: list[_Rule] = [
    # .npmrc: `//registry.npmjs.org/:_authToken=...`, `:_auth=` (base64 user:password) and
    # `:_password=`; npm 9 accepts these scoped to a registry only, hence the colon.
    (
        (":_",),
        re.compile(
            r"(?P<keep>:_(?:authToken|auth|password)\s*=\s*)"
            + _NOT_REDACTED
            + _NOT_A_REFERENCE
            + r"[^\s\"']+"
        ),
        _keep_group("keep"),
    ),
    # Azure storage / service bus connection strings: AccountKey=...; SharedAccessKey=...
    (
        ("Key=",),
        re.compile(
            r"(?P<keep>(?:AccountKey|SharedAccessKey)=)"
            + _NOT_REDACTED
            + _NOT_A_REFERENCE
            + r"[^;\s\"']+"
        ),
        _keep_group("keep"),
    ),
]


# A connection string's keys as libpq, ADO.NET, ODBC and JDBC name them (`host`, `Server`,
# `Data Source`, `User Id`, `Initial Catalog`, `sslmode`): a plain word before `password` is one
# only between two of them. One-line code assigns a word between any names (`password=input;
# user=get_user();`, `opts.password=newpass; opts.user=name;`, `local password=readpass`), and so
# does `password=swordfish; user=bob` alone, which is kept as generation 5 kept it.
_CONNECTION_KEY = (
    r"(?i:server|host|hostaddr|data[ ]source|addr|address|network[ ]address|user[ ]?id|uid"
    r"|user|username|database|initial[ ]catalog|dbname|port|sslmode|encrypt|driver"
    r"|trusted_connection|integrated[ ]security|application[ ]name|connect_timeout)"
)
_CONNECTION_KEY_BEFORE = re.compile(
    rf"(?:^|(?<=[;&\s])){_CONNECTION_KEY}[ \t]*=[^;&\s=]*+(?:[ \t]*+[;&][ \t]*+|[ \t]++)\Z"
)
# How far before `password=` its string's previous key is looked for.
_CONNECTION_KEY_WINDOW = 200


def _connection_credential(match: re.Match[str]) -> str:
    """A connection or query string's password redacted, unless it is a plain word that no
    credential is (`plain_credential`: `password=required; user=x`) or that no connection
    string's key comes before (`_CONNECTION_KEY`)."""
    value = match.group("value")
    if _plain_word(value):
        # The literal starts after the name's first letter (`assword=`, `wd=`).
        name_start = match.start() - 1
        before = _CONNECTION_KEY_BEFORE.search(
            match.string, max(0, name_start - _CONNECTION_KEY_WINDOW), name_start
        )
        if before is None or not plain_credential("password", value):
            return match.group()
    return f"{match.group('keep')}{REDACTED}"


# A URL query's parameter (`?token=swordfish&x=1`, `&api_key=abc123`): a name ending in a
# credential's word (one lookbehind each, in lower case, capitalised or in capitals; which names
# one `credential_key` judges), the value up to the next parameter, a fragment or the URL's end.
_QUERY_ENDS = tuple(
    spelled
    for word in ("token", "key", "secret", "password", "passwd", "pass", "pwd", "phrase")
    + ("credential", "credentials")
    for spelled in (word, word.capitalize(), word.upper())
)
_QUERY_PATTERN = re.compile(
    r"(?P<keep>[?&](?P<name>[A-Za-z0-9_.\-]{1,64}+)(?:"
    + "|".join(f"(?<={end})" for end in _QUERY_ENDS)
    + r")=)"
    + _NOT_REDACTED
    + r"(?![{$<%])(?P<value>[^&#\s\"'<>{}$%`|()\\,;\[\]]++)(?![{}$%`|(\\])"
)


# Words a query's credential-named parameter takes as a setting, not a secret: fetch's
# `?credentials=include`, a version's `?token=latest`, a service's public `?apikey=demo`.
_QUERY_WORDS = frozenset({"include", "omit", "latest", "current", "demo", "public", "anonymous"})


def _query_credential(match: re.Match[str]) -> str:
    """A query parameter under a credential's name redacted, unless it is a paging cursor
    (`?pageToken=`, `?nextPageToken=`, whatever its shape: a cursor is no credential), its value
    is no credential by its shape (`known_value`), a placeholder in capitals
    (`?token=YOUR_TOKEN`), a setting's word (`_QUERY_WORDS`) or a plain word that no credential
    is (`plain_credential`: `?token=expired`)."""
    name = match.group("name")
    value = match.group("value")
    kept = (
        not credential_key(name)
        or _cursor_name(name)
        or value.lower() in _QUERY_WORDS
        or known_value(name, value)
        or _OPTION_PLACEHOLDER.fullmatch(value) is not None
        or (_plain_word(value) and not plain_credential(name, value))
    )
    return match.group() if kept else f"{match.group('keep')}{REDACTED}"


QUERY_RULES: list[_Rule] = [(("?", "&"), _QUERY_PATTERN, _query_credential)]
# Its hyperscan gate: a parameter whose name ends in a credential's word, and a value's first byte.
QUERY_GATE = r"[?&][A-Za-z0-9_.\-]*(?:" + "|".join(_QUERY_ENDS) + r")=[^&#\x09-\x0d\x20\"'<>{}$%]"

CONNECTION_RULES: list[_Rule] = [
    # Any command's `--password=...` (mysql, docker login, redis-cli, psql wrappers).
    (
        ("assword=",),
        re.compile(
            r"(?P<keep>--password=)"
            + _NOT_REDACTED
            + _NOT_A_REFERENCE
            # A help text's placeholder: `--password=PASSWORD`.
            + r"(?![A-Z_]+(?![^\s\"']))[^\s\"']+"
        ),
        _keep_group("keep"),
    ),
    # Unquoted `password=` in connection strings and query strings (`...;Password=hunter2;`,
    # `?user=a&password=s3cret`; PASSWORD= is the .env rule's), and `Pwd=` after a `;`. The
    # value must hold a character no identifier has (a digit, a symbol), so that code passing
    # `password=password` or `password=self.password` keeps it; or be a plain word between
    # two of a connection string's keys (`Server=db;Password=swordfish;User Id=app`, libpq's
    # `host=db password=swordfish user=bob`; `_CONNECTION_KEY`).
    *(
        (
            (literal,),
            re.compile(
                rf"(?P<keep>{literal}{before})"
                + _NOT_REDACTED
                # `%s`, `%(pw)s`: a query's parameter, not its value; `==` a comparison.
                + r"(?!%[s(])(?!=)(?P<value>"
                + _CREDENTIAL_VALUE
                + r"|[A-Za-z]++(?=(?:[ \t]*+[;&][ \t]*+|[ \t]++)"
                + _CONNECTION_KEY
                + r"[ \t]*+=(?!=)))"
            ),
            _connection_credential,
        )
        for literal, before in (
            ("assword=", "(?<=[pP]assword=)(?<![A-Za-z][pP]assword=)"),
            ("wd=", "(?<=;[pP]wd=)"),
            ("WD=", "(?<=;PWD=)"),
        )
    ),
]
