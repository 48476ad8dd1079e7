"""Credentials recognised by their name: `.env` and config assignments, quoted values of
credential-named keys, connection-string passwords, registry and Docker config credentials."""

from __future__ import annotations

import base64
import re

from app.privacy.common import _NOT_A_REFERENCE, _NOT_REDACTED, REDACTED, _keep_group, _Rule


def basic_credentials(value: str) -> bool:
    """Whether `value` is the base64 of `user:password`, as HTTP Basic and Docker's `auth` hold."""
    try:
        return b":" in base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error is one
        return False


def _assignment(match: re.Match[str]) -> str:
    """`NAME = value` or `"name": "value"`: keep the name and quotes, redact the value."""
    value = match.group("value")
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group('name')}{match.group('sep')}{quote}{REDACTED}{quote}"


# A name that ends in a credential's word but may name no credential: a Helm chart's
# `existingSecret` is the name of the Kubernetes Secret holding one (so are `existingPasswordSecret`
# and `passwordSecret`), `passwordSecretKey` names the key in that Secret which holds it, and
# `next_token`, `nextPageToken`, `ContinuationToken` are pagination cursors (the page after this
# one). The qualifier must start the name (or follow the `.` of a dotted key): after a prefix,
# `FB_PAGE_TOKEN`, `REPO_SYNC_TOKEN`, `fbPageToken` are a service's tokens and `appPasswordSecret`
# an app's secret. A Secret's key may follow a prefix (`adminPasswordSecretKey`): what qualifies it
# is the credential's word before `SecretKey`, without which `jwtSecretKey` is a credential. The
# name alone decides nothing (`RESUME_TOKEN=Zm9v...`, `EXISTING_SECRET=s3cr3tP@ss` are
# credentials): the value must also have the shape of what the name says, see `reference`.
_REFERENCE_NAME = re.compile(
    r"(?:(?<![\w\-])"
    r"(?:(?P<secret>(?i:existing)[\w\-]*?(?i:secret)|(?i:password|passwd|credentials?)[_\-]?(?i:secret))"
    r"|(?i:next|prev|previous|page|continuation|continue|cursor|sync|resume|start|starting)"
    r"[_\-]?(?:(?i:page|sync)[_\-]?)?(?i:token))"
    r"|(?P<key>(?i:existing|password|passwd|token|credentials?)[_\-]?(?i:secret)[_\-]?(?i:key)))\Z"
)
# A Kubernetes Secret's name as charts spell them: lowercase words or numbers, two or more,
# joined by `-` or `.` (`my-db-secret`, `redis-2`). A part mixing letters and digits
# (`hunter2-real-pa55`), a capital or a symbol is a password's shape, and is redacted.
_SECRET_NAME_VALUE = re.compile(r"(?:[a-z]+|[0-9]+)(?:[-.](?:[a-z]+|[0-9]+))+")
# A key of a Secret's data as charts spell them: lowercase words joined by `-`, `_` or `.`, one
# word too, as the charts' default `password` is (`postgres-password`, `tls.key`).
_SECRET_KEY_VALUE = re.compile(r"[a-z]+(?:[-_.][a-z]+)*")
# A cursor that cannot be a credential: a page number or offset, or a short word with a page
# number (`page2`, `page-2`, `CAIQAA`). An opaque cursor (base64, hex, 10+ mixed characters)
# cannot be told from a token by its shape, so it is redacted: that costs a cursor, a leak
# costs a credential.
_CURSOR_VALUE = re.compile(r"[0-9]{1,10}|[A-Za-z]{1,8}(?:[-_]?[0-9]{1,4})?")


def reference(name: str, value: str) -> bool:
    """Whether `value`, under a key named like a credential, is a secret's name, a key in a
    secret, or a cursor (see above) rather than a credential."""
    found = _REFERENCE_NAME.search(name)
    if found is None:
        return False
    if found.group("secret"):
        shape = _SECRET_NAME_VALUE
    elif found.group("key"):
        shape = _SECRET_KEY_VALUE
    else:
        shape = _CURSOR_VALUE
    return shape.fullmatch(value) is not None


# A key's words: camelCase and PascalCase split (`githubToken`, `AuthToken`), an acronym a word of
# its own before a capitalised one (`APIKey`: `API`, `Key`), and every other character a break
# (`x-api-key`, `DB_PASSWORD`, `github.token`).
_KEY_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# What a credential-named key's last words spell, in lower case. Only whole words count
# (`maxTokens`, `tokenizer`, `token_budget`, `secretName`, `monkey`, `publicKey` name none);
# the glued ones are spelled as one word too (`accesstoken`, `apikey`).
_CREDENTIAL_WORDS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "credential",
        "credentials",
        "apikey",
        "secretkey",
        "privatekey",
        "secretaccesskey",
        "accesstoken",
        "authtoken",
        "refreshtoken",
        "clientsecret",
    }
)
_LONGEST_CREDENTIAL_WORD = max(map(len, _CREDENTIAL_WORDS))
# Tokens that the word before them makes no credential: a tokenizer's special tokens
# (`"unk_token": "<unk>"`, `eos_token`) and an MCP request's `progressToken`.
_NOT_CREDENTIAL_TOKENS = frozenset(
    {"unk", "pad", "bos", "eos", "sep", "cls", "mask", "special", "progress"}
)


def credential_key(name: str) -> bool:
    """Whether an object key names a credential: its last words, a number after them aside
    (`password2`), spell one of `_CREDENTIAL_WORDS`, and a token is not one of
    `_NOT_CREDENTIAL_TOKENS`. The spelling may also start inside a word
    of capitals, where acronyms run together (`OpenAIAPIKey`: `AIAPI`, `Key`; `GITHUBTOKEN`)."""
    words = _KEY_WORD.findall(name)
    while words and words[-1].isdigit():
        words.pop()
    if (
        len(words) > 1
        and words[-1].lower() == "token"
        and words[-2].lower() in _NOT_CREDENTIAL_TOKENS
    ):
        return False
    spelled = ""
    for word in reversed(words):
        spelled = word.lower() + spelled
        if spelled in _CREDENTIAL_WORDS:
            return True
        if word.isupper() and len(word) > 1:
            # Where in the acronym the spelling starts is not known: any of its letters.
            if any(spelled[start:] in _CREDENTIAL_WORDS for start in range(1, len(word))):
                return True
        if len(spelled) >= _LONGEST_CREDENTIAL_WORD:
            return False
    return False


_NAME_BEFORE = re.compile(r"[\w.\-]*\Z")


def _credential_assignment(match: re.Match[str]) -> str:
    """`_assignment` unless the whole name (the part the rule matched and the identifier
    before it) and the value are a reference's; then the text as it was."""
    start = match.start()
    before = _NAME_BEFORE.search(match.string, max(0, start - 100), start)
    name = (before.group() if before else "") + match.group("name").strip("\"'")
    value = match.group("value").strip("\"'")
    return match.group() if reference(name, value) else _assignment(match)


# identifier or attribute path (`password`, `self.password`, `str`, `None`) holds.
_UNQUOTED = r"[^\s\"'#(){}\[\]<>$,;&|`\\]"
_CREDENTIAL_VALUE = rf"(?={_UNQUOTED}*?[^A-Za-z_.\s\"'#(){{}}\[\]<>$,;&|`\\]){_UNQUOTED}+"

_CREDENTIAL_NAME = (
    r"(?:[pP]assw(?:or)?d|PASSW(?:OR)?D|[sS]ecret|SECRET|[tT]oken|TOKEN"
    r"|[aA]pi[_\-]?[kK]ey|API[_\-]?KEY)"
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
    # `password=password` or `password=self.password` keeps it.
    *(
        (
            (literal,),
            re.compile(
                # `%s`, `%(pw)s`: a query's parameter, not its value.
                rf"(?P<keep>{literal}{before})" + _NOT_REDACTED + r"(?!%[s(])" + _CREDENTIAL_VALUE
            ),
            _keep_group("keep"),
        )
        for literal, before in (
            ("assword=", "(?<=[pP]assword=)(?<![A-Za-z][pP]assword=)"),
            ("wd=", "(?<=;[pP]wd=)"),
            ("WD=", "(?<=;PWD=)"),
        )
    ),
]

ASSIGNMENT_RULES: list[_Rule] = [
    # .env / shell style: API_KEY=..., DB_PASSWORD="...", export GITHUB_TOKEN=...
    *(
        (
            (literal,),
            re.compile(
                rf"(?P<name>{word})(?P<sep>\s*=(?!=)\s*)"
                + _NOT_REDACTED
                + r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'#]+)"
            ),
            _credential_assignment,
        )
        for word, literal in (
            ("KEY", "KEY"),
            ("SECRET", "SECRET"),
            ("TOKEN", "TOKEN"),
            ("PASSWORD", "PASSWORD"),
            ("PASSWD", "PASSWD"),
            ("CREDENTIALS?", "CREDENTIAL"),
            ("AUTH", "AUTH"),
            # MYSQL_PWD; a lone PWD, and BUILD_PWD=/home/u/src, are a working directory.
            (r"_PWD(?!\s*=\s*/)", "_PWD"),
        )
    ),
    # Quoted values of credential-named keys in JSON, YAML or code: "password": "hunter2".
    *(
        (
            literals,
            re.compile(
                rf"(?P<name>{stem}[\"']?)(?P<sep>\s*[:=]\s*)"
                + _NOT_REDACTED
                + r"(?P<value>\"[^\"\s]{4,}\"|'[^'\s]{4,}')"
            ),
            _credential_assignment,
        )
        for stem, literals in (
            ("ecret(?<=[sS]ecret)", ("ecret",)),
            ("ECRET(?<=SECRET)", ("ECRET",)),
            ("oken(?<=[tT]oken)", ("oken",)),
            ("OKEN(?<=TOKEN)", ("OKEN",)),
            ("assw(?<=[pP]assw)(?:or)?d", ("assw",)),
            ("ASSW(?<=PASSW)(?:OR)?D", ("ASSW",)),
            ("pi(?<=[aA]pi)[_\\-]?[kK]ey", ("key", "Key")),
            ("PI(?<=API)[_\\-]?KEY", ("KEY",)),
        )
    ),
    # A Docker config's registry credentials: "auth": "<base64 of user:password>" (only that:
    # "auth" is also a topic, `{"auth": "refresh tokens rotate"}` in a kv memory).
    (
        ('"auth"',),
        re.compile(r'(?P<name>"auth")(?P<sep>\s*:\s*)(?P<value>"[A-Za-z0-9+/=]{8,}")'),
        lambda match: (
            _assignment(match) if basic_credentials(match.group("value")[1:-1]) else match.group()
        ),
    ),
    # Unquoted values of credential-named keys on a line of their own: YAML, TOML, INI, .env,
    # `export`, properties (`password: hunter2`, `api_key = abc123`, `  - TOKEN=x1`). The value
    # must be the line's last word and not one an identifier could be (see _CREDENTIAL_VALUE),
    # so that `password: str`, `token: Optional[str] = None`, `password = get_password()` or
    # `secret: SecretStr` keep theirs; digits alone are a count (`max_token: 4096`) or a version
    # (`token: v1.2.3`).
    (
        ("assw", "ASSW", "ecret", "ECRET", "oken", "OKEN", "key", "Key", "KEY"),
        re.compile(
            r"^(?P<name>[ \t]*(?:-[ \t]+)?(?:export[ \t]+)?[\w.\-]*?" + _CREDENTIAL_NAME + ")"
            r"(?P<sep>[ \t]*[:=][ \t]*)"
            + _NOT_REDACTED
            + r"(?![=:])(?![-+]?v?\d+(?:\.\d+)?\b)(?!(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*\b)(?P<value>"
            + _CREDENTIAL_VALUE
            + r")(?<!:)(?=[ \t]*(?:[ \t]#[^\n]*)?\r?$)",
            re.MULTILINE,
        ),
        _credential_assignment,
    ),
]
