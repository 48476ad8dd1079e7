"""Privacy and hygiene for any text before it is stored or sent to an LLM.

Pure functions, used on the capture hot path, by the transcript sync and by the worker before it
calls Gemini. Every regex is compiled once, and each one runs only when a cheap substring test
says its pattern could occur, so clean text costs a handful of `in` scans.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from types import FunctionType
from typing import Any

from app.textscan import SHORT_TEXT, LiteralScanner

REDACTED = "[REDACTED]"

# Deep enough for any real tool payload; shallow enough that recursion never nears Python's limit.
DEFAULT_MAX_DEPTH = 64


class NestingTooDeep(ValueError):
    """A JSON value nests deeper than allowed."""


# --- clean_text ---------------------------------------------------------------------------------

# A Python str decoded from JSON holds valid pairs as one code point, so any surrogate left in it
# is a lone one, which UTF-8 (and therefore Postgres) cannot store.
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(s: str) -> str:
    """Remove NUL characters and replace lone surrogates with U+FFFD."""
    if "\x00" in s:
        s = s.replace("\x00", "")
    return _without_surrogates(s)


def _without_surrogates(s: str) -> str:
    if not s.isascii():
        # Encoding is a C loop that fails only on a surrogate; far cheaper than a regex scan.
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            s = _SURROGATE.sub("\ufffd", s)
    return s


def surrogates_replaced(data: Any) -> Any:
    """A JSON object as parsed, its strings and its arrays' strings with each lone surrogate
    replaced by U+FFFD, as `clean_text` replaces them; anything else as it is.

    For request bodies before validation: pydantic refuses a string holding a lone surrogate
    where a field has a length bound ("Input should be a valid string"), so a JSON `"\\ud800"`
    in an id or a path was a 422 where the same escape in stored text is cleaned. NUL characters
    are left to each field's own rule. Nested values (tool arguments, memory values) are
    sanitized whole by their owners."""
    if not isinstance(data, dict):
        return data
    return {name: _strings_replaced(value) for name, value in data.items()}


def lone_surrogates_replaced_everywhere(value: Any) -> Any:
    """A parsed JSON value with every lone surrogate replaced by U+FFFD, in keys and strings at
    any depth (`surrogates_replaced` does a body's own fields only)."""
    if isinstance(value, str):
        return _without_surrogates(value)
    if isinstance(value, list):
        return [lone_surrogates_replaced_everywhere(item) for item in value]
    if isinstance(value, dict):
        return {
            _without_surrogates(key): lone_surrogates_replaced_everywhere(item)
            for key, item in value.items()
        }
    return value


def _strings_replaced(value: Any) -> Any:
    if isinstance(value, str):
        return _without_surrogates(value)
    if isinstance(value, list):
        return [_without_surrogates(item) if isinstance(item, str) else item for item in value]
    return value


# --- strip_private ------------------------------------------------------------------------------

# Patterns start with a literal "<" so that the regex engine can skip ahead with a fast search.
# A private span's opening or closing tag. Spans nest: the text stays hidden until the closing
# tag of the first opening one (a regex to the first closing tag showed the outer span's rest);
# an unclosed <private> hides everything after it: losing text is better than leaking it.
_PRIVATE_TAG = re.compile(r"<(?:(?P<close>/)(?i:private)\s*|(?i:private)(?:\s[^>]*)?)>")
# Only complete <memory> blocks are ours (the context builder always closes them); a lone
# "<memory>" in someone's code is left alone.
_MEMORY = re.compile(r"<(?i:memory)(?:\s[^>]*)?>.*?</(?i:memory)\s*>\n?", re.DOTALL)


_PRIVATE_LITERALS = ("rivate", "RIVATE")
_MEMORY_LITERALS = ("emory", "EMORY")


def strip_private(s: str) -> str:
    """Remove `<private>…</private>` spans and our own injected `<memory>…</memory>` blocks."""
    return _strip_private(s, _SCANNER.present(s))


def _strip_private(s: str, found: frozenset[str]) -> str:
    """`strip_private` given the literals of `_SCANNER` that occur in `s`."""
    if "<" not in found:
        return s
    if not found.isdisjoint(_PRIVATE_LITERALS):
        s = _without_private(s, _PRIVATE_TAG, _nothing)
    if not found.isdisjoint(_MEMORY_LITERALS):
        s = _MEMORY.sub("", s)
    return s


def _without_private(s: str, outside: re.Pattern[str], removed: Callable[[str], str]) -> str:
    """`s` with each private span replaced by `removed(span)`; `outside` finds the next tag
    where no span is open (and what is not one there: markdown's code spans). A closing tag
    outside any span is text. Spans nest; tags that never balance hide up to the last closing
    tag, or, with none after the opening one, the rest of the text: a mention of the tag before
    a real span ("wrap secrets in <private> tags") hid everything after that span."""
    parts: list[str] = []
    kept = position = 0
    while (match := outside.search(s, position)) is not None:
        position = match.end()
        if match.group("close") is not None or match.lastgroup == "code":
            continue
        start, depth, last_close = match.start(), 1, None
        while depth:
            tag = _PRIVATE_TAG.search(s, position)
            if tag is None:
                position = len(s) if last_close is None else last_close
                break
            position = tag.end()
            if tag.group("close") is not None:
                depth, last_close = depth - 1, position
            else:
                depth += 1
        parts += (s[kept:start], removed(s[start:position]))
        kept = position
    if not parts:
        return s
    parts.append(s[kept:])
    return "".join(parts)


def _nothing(_: str) -> str:
    return ""


def _newlines_of(span: str) -> str:
    return "\n" * span.count("\n")


# A markdown file is stripped whole, before it is chunked: stripped chunk by chunk, a span
# crossing a chunk boundary showed its inside in the next chunk (chunks overlap and each was
# sanitized alone). A span becomes the newlines it held, so every later line keeps its number,
# and a <private> tag inside an inline code span (docs about the tag) is text, not a span. Our
# <memory> blocks go wherever they are: one kept in a chunk would nest in the context block.
_MARKDOWN_PRIVATE_TAG = re.compile(f"(?P<code>`[^`\\n]*`)|{_PRIVATE_TAG.pattern}")


def strip_private_lines(s: str) -> str:
    """`strip_private` for a markdown file: each span becomes its newlines, code spans kept."""
    found = _SCANNER.present(s)
    if "<" not in found:
        return s
    if not found.isdisjoint(_PRIVATE_LITERALS):
        s = _without_private(s, _MARKDOWN_PRIVATE_TAG, _newlines_of)
    if not found.isdisjoint(_MEMORY_LITERALS):
        s = _MEMORY.sub(_newlines, s)
    return s


def _newlines(match: re.Match[str]) -> str:
    return _newlines_of(match.group())


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


# A name that ends in a credential's word but names no credential: a Helm chart's
# `existingSecret` is the name of the Kubernetes Secret holding one, and `next_token`,
# `nextPageToken`, `ContinuationToken` are pagination cursors (the page after this one). The
# qualifier starts the name or a part of it (after `_`, `-`, `.` or at a camel-case hump), so
# that `contextToken` is no `next` one. Only the name-based rules consult it: a value with a
# credential's own shape (`ghp_...`, `AKIA...`) is redacted under any name.
_REFERENCE_NAME = re.compile(
    r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))"
    r"(?:(?i:existing)[_\-]?(?i:secret)"
    r"|(?i:next|prev|previous|page|continuation|continue|cursor|sync|resume|start|starting)"
    r"[_\-]?(?:(?i:page)[_\-]?)?(?i:token))\Z"
)


def reference_name(name: str) -> bool:
    """Whether a key named like a credential names a secret or a cursor instead (see above)."""
    return _REFERENCE_NAME.search(name) is not None


_NAME_BEFORE = re.compile(r"[\w.\-]*\Z")


def _credential_assignment(match: re.Match[str]) -> str:
    """`_assignment` unless the whole name (the part the rule matched and the identifier
    before it) is a reference name; then the text as it was."""
    start = match.start()
    before = _NAME_BEFORE.search(match.string, max(0, start - 100), start)
    name = (before.group() if before else "") + match.group("name").strip("\"'")
    return match.group() if reference_name(name) else _assignment(match)


# What may stand between a shell separator (or a quote opening a `sh -c "..."`) and a command
# word: blanks, a prompt, a YAML list item or step key (`- `, `run: `), and a command that runs
# another (`sudo`, `env X=1`, `docker exec -it db`, `kubectl exec pod --`).
_COMMAND_HEAD = re.compile(
    r"[ \t]*(?:[$#>%][ \t]+|-[ \t]+|[\w\-]+:[ \t]+)?"
    r"(?:(?:sudo|doas|env|exec|time|nohup|nice|command|xargs|timeout|watch|docker|podman"
    r"|kubectl|oc|ssh|nerdctl)[ \t][^\n]*)?"
)
_SHELL_SEPARATOR = re.compile(r"[\n|;&(`\"']")


def _at_command(s: str, start: int) -> bool:
    """Whether `start` in `s` begins a command: what precedes it since the last shell separator
    (within 200 characters) is nothing, a prompt or a command running another."""
    head = s[max(0, start - 200) : start]
    if start > 200 and not _SHELL_SEPARATOR.search(head):
        return False
    return _COMMAND_HEAD.fullmatch(_SHELL_SEPARATOR.split(head)[-1]) is not None


def _command_option(match: re.Match[str]) -> str:
    """A client's password option: redacted when the client is run as a command."""
    if not _at_command(match.string, match.start()):
        return match.group()
    value = match.group("value")
    quote = value[0] if value[0] in ("'", '"') else ""
    return f"{match.group('keep')}{quote}{REDACTED}{quote}"


_NOT_REDACTED = r"(?!\[REDACTED\])"
# Not a value but a reference to one: `${NPM_TOKEN}`, `{self.account_key}`, `<password>`.
_NOT_A_REFERENCE = r"(?![{$<])"
# A command-line option's value, bare or quoted (`-p'hunter2'`, `-a "s3 cret"`), not a reference.
# A bare one ends where the shell ends a word (`$(mysql -px)`, a `mysql -px` in backticks).
_OPTION_VALUE = (
    rf"(?P<value>'{_NOT_A_REFERENCE}[^'\n]+'|\"{_NOT_A_REFERENCE}[^\"\n]+\""
    rf"|{_NOT_A_REFERENCE}[^\s\"'`;|&()<>]+)"
)
# An unquoted value that is not code: a run of characters that stop at whitespace, quotes,
# brackets, separators and `$` (a `${VAR}` reference), holding at least one character that no
# identifier or attribute path (`password`, `self.password`, `str`, `None`) holds.
_UNQUOTED = r"[^\s\"'#(){}\[\]<>$,;&|`\\]"
_CREDENTIAL_VALUE = rf"(?={_UNQUOTED}*?[^A-Za-z_.\s\"'#(){{}}\[\]<>$,;&|`\\]){_UNQUOTED}+"

_CREDENTIAL_NAME = (
    r"(?:[pP]assw(?:or)?d|PASSW(?:OR)?D|[sS]ecret|SECRET|[tT]oken|TOKEN"
    r"|[aA]pi[_\-]?[kK]ey|API[_\-]?KEY)"
)

# (literals, pattern, replacement). Every match of the pattern contains one of its literals, so
# a pattern runs only when `literal in s` finds one: `in` is a C substring search many times
# faster than the regex engine's prefix scan, and most text holds none of them (in the capture
# profile the 33 regex passes over every 1-20 KB string were the largest CPU cost).
_Rule = tuple[tuple[str, ...], re.Pattern[str], _Replacement]
_RULES: list[_Rule] = [
    (
        ("-----BEGIN ",),
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # Google API keys (Gemini, Maps, Firebase).
    (("AIza",), re.compile(r"AIza[0-9A-Za-z_\-]{35}"), REDACTED),
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-api03-...
    (("sk-",), re.compile(r"sk-(?<![\w\-]sk-)[A-Za-z0-9_\-]{20,}"), REDACTED),
    # GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_ and fine-grained github_pat_.
    (
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"gh(?<!\wgh)[pousr]_[A-Za-z0-9]{30,}"),
        REDACTED,
    ),
    (("github_pat_",), re.compile(r"github_pat_\w{22,}"), REDACTED),
    # GitLab personal access tokens.
    (("glpat-",), re.compile(r"glpat-[A-Za-z0-9_\-]{20,}"), REDACTED),
    # Hugging Face access tokens (hf_ and 34 letters and digits; `hf_hub_download` has no run
    # of 30 without an underscore).
    (("hf_",), re.compile(r"hf_(?<!\whf_)[A-Za-z0-9]{30,}"), REDACTED),
    # PyPI upload tokens: a macaroon whose base64 starts "AgE" (pypi.org's and test.pypi's).
    (("pypi-Ag",), re.compile(r"pypi-AgE[A-Za-z0-9_\-]{50,}"), REDACTED),
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
    # The MySQL clients' password glued to -p (`mysql -u root -phunter2`; a lone -p prompts),
    # `docker login -p x` (podman's and skopeo's alike) and `redis-cli -a x`. The client must be
    # a command word (see _at_command), not a path part (`/var/lib/mysql`) or another tool
    # (`mysql_config`), and the option one of its next words: the look-ahead stops at a shell
    # separator, a newline and the next mention of the client, so that `find /var/lib/mysql
    # -print` keeps its option and 1 MB of "mysql " costs one short look-ahead a word (it cost
    # 291 ms, scanning 200 characters after each).
    *(
        (
            (literal,),
            re.compile(
                rf"(?P<keep>{command}(?<![^\s|;&(`\"']{command}){tail}(?=[ \t])"
                rf"(?:[ \t]+(?!{stop})[^\s|;&()`]++){{0,40}}?[ \t]+{option})"
                + _NOT_REDACTED
                + _OPTION_VALUE
            ),
            _command_option,
        )
        for literal, command, tail, stop, option in (
            ("mysql", "mysql", "[a-z]*", "mysql", "-p"),
            ("mariadb", "mariadb", "(?:-?[a-z]+)?", "mariadb", "-p"),
            *(
                (login, login, "", login.split()[0], r"(?:-p|--password)[ \t]+(?!-)")
                for login in ("docker login", "podman login", "skopeo login")
            ),
            ("redis-cli", "redis-cli", "", "redis-cli", r"(?:-a|--pass)[ \t]+(?!-)"),
        )
    ),
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
    # AWS access key ids.
    (("AKIA", "ASIA"), re.compile(r"A(?<!\wA)[KS]IA[0-9A-Z]{16}(?![0-9A-Za-z])"), REDACTED),
    # AWS secret access keys (40 characters of base64) after their name: the id alone was
    # redacted, and `aws iam create-access-key`'s JSON or ~/.aws/credentials kept the secret.
    *(
        (
            (stem,),
            re.compile(
                rf"(?P<keep>{stem}(?<={word})[\"']?\s*[:=]\s*[\"']?)"
                + _NOT_REDACTED
                + r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
            ),
            _keep_group("keep"),
        )
        for stem, word in (
            ("ecretAccessKey", "[sS]ecretAccessKey"),
            ("ecret_access_key", "[sS]ecret_access_key"),
            ("ECRET_ACCESS_KEY", "SECRET_ACCESS_KEY"),
            ("ecret-access-key", "[sS]ecret-access-key"),
        )
    ),
    # Slack tokens.
    (("xox",), re.compile(r"xox[abposr]-[A-Za-z0-9\-]{10,}"), REDACTED),
    # Stripe secret and restricted keys: the kind (sk_live_) stays readable.
    *(
        (
            (kind,),
            re.compile(rf"(?P<keep>{kind}(?<=\b[sr]{kind}))[A-Za-z0-9]{{16,}}"),
            _keep_group("keep"),
        )
        for kind in ("k_live_", "k_test_")
    ),
    # JSON Web Tokens.
    (
        ("eyJ",),
        re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
        REDACTED,
    ),
    # Authorization headers: "Authorization: Bearer x", "Authorization: Basic x", "token x".
    *(
        (
            (stem,),
            re.compile(
                rf"(?P<keep>{stem}(?<={word})[\"']?\s*[:=]\s*[\"']?"
                r"(?:(?i:bearer|basic|token|bot)\s+)?)" + _NOT_REDACTED + r"[^\s\"',;<>]{8,}"
            ),
            _keep_group("keep"),
        )
        for stem, word in (("uthorization", "[aA]uthorization"), ("UTHORIZATION", "AUTHORIZATION"))
    ),
    # A bare bearer credential anywhere else (curl -H, logs).
    *(
        (
            (stem,),
            re.compile(
                rf"(?P<keep>{stem}(?<=\b{word})\s+)" + _NOT_REDACTED + r"[A-Za-z0-9._~+/=\-]{8,}"
            ),
            _keep_group("keep"),
        )
        for stem, word in (("earer", "[bB]earer"), ("EARER", "BEARER"))
    ),
    # Passwords in URLs: scheme://user:password@host keeps the user and host.
    (
        ("://",),
        re.compile(r"(?P<keep>://[^\s:/@\"'<>]*:)" + _NOT_REDACTED + r"[^\s@/\"'<>]+(?=@)"),
        _keep_group("keep"),
    ),
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


# Finer gates for the rules whose literals most real text holds ("token", "key", "://" occur
# in ~half of the capture benchmark's strings, nearly never as a credential): hyperscan
# expressions over the UTF-8 bytes that match wherever the rule's regex can (each is the regex
# with lookarounds dropped, `\s` widened to every byte a Unicode space can use, and character
# classes widened to bytes), found in the same pass as the literals. A rule runs only when its
# literal and its gate occur. Replacements insert only "[REDACTED]" next to text they keep, so
# they cannot create a match that the text did not already gate in, as for the literals.
_SPACE = r"[\x09-\x0d\x1c-\x20\x80-\xff]*"
_QUOTED = r"""(?:"[^"]{4,}"|'[^']{4,}')"""
_QUOTED_RULES = [pattern for _, pattern, _ in _RULES if r"(?P<sep>\s*[:=]\s*)" in pattern.pattern]
_UNQUOTED_BYTE = r"[^\x09-\x0d\x20\"'#(){}\[\]<>$,;&|`\\]"
_CONFIG_RULE = next(pattern for _, pattern, _ in _RULES if pattern.flags & re.MULTILINE)
_RULE_GATES: dict[re.Pattern[str], str] = {
    next(pattern for literals, pattern, _ in _RULES if literals == ("://",)): r"://[^:/@]*:[^@/]+@",
    **{
        pattern: rf"{name}[\"']?{_SPACE}[:=]{_SPACE}{_QUOTED}"
        for pattern, name in zip(
            _QUOTED_RULES,
            (
                "[sS]ecret",
                "SECRET",
                "[tT]oken",
                "TOKEN",
                "[pP]assw(?:or)?d",
                "PASSW(?:OR)?D",
                "[aA]pi[_\\-]?[kK]ey",
                "API[_\\-]?KEY",
            ),
            strict=True,
        )
    },
    _CONFIG_RULE: (
        rf"{_CREDENTIAL_NAME}[\t ]*[:=][\t ]*{_UNQUOTED_BYTE}*"
        r"[^A-Za-z_.\x09-\x0d\x20\"'#(){}\[\]<>$,;&|`\\]"
    ),
}

# Every literal the privacy rules test for, and the gates above, found in one pass (see
# app/textscan.py).
_SCANNER = LiteralScanner(
    ("<", *_PRIVATE_LITERALS, *_MEMORY_LITERALS, *(lit for rule in _RULES for lit in rule[0])),
    gates={f"gate:{pattern.pattern}": expression for pattern, expression in _RULE_GATES.items()},
)
# (literals, gate name or None, pattern, replacement) in rule order.
_PLAN = [
    (literals, f"gate:{pattern.pattern}" if pattern in _RULE_GATES else None, pattern, replacement)
    for literals, pattern, replacement in _RULES
]


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
        for literals, gate, pattern, replacement in _PLAN
        if not found.isdisjoint(literals) and (gate is None or gate in found)
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


# A string value under a key named like a credential is redacted whole, whatever its shape.
_SECRET_KEY = re.compile(
    r"(?:.*[_\-])?(?:api[_\-]?key|apikey|secret|client[_\-]?secret|secret[_\-]?access[_\-]?key"
    r"|password|passwd|token|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token"
    r"|private[_\-]?key|credentials?)",
    re.IGNORECASE,
)


# What a scanner found in each string of a sanitized value: id(string) -> (string, names).
Scanned = dict[int, tuple[str, frozenset[str]]]


def sanitize_json(
    value: Any,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    scanner: LiteralScanner | None = None,
    scanned: Scanned | None = None,
) -> Any:
    """Apply `sanitize_text` to every string (keys too) of a JSON value; returns a new value.

    With `scanner` (from `privacy_scanner`) and `scanned`, each string value of the result whose
    scan is still valid (sanitizing left it unchanged) gets its found names in `scanned`.
    Raises NestingTooDeep when containers nest deeper than `max_depth`.
    """
    return _sanitize(value, max_depth, scanner or _SCANNER, scanned)


def _sanitize(value: Any, depth_left: int, scanner: LiteralScanner, scanned: Scanned | None) -> Any:
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
            if isinstance(item, str) and item and (secret or _docker_auth(clean_key, item)):
                out[clean_key] = REDACTED
            else:
                out[clean_key] = _sanitize(item, depth_left - 1, scanner, scanned)
        return out
    if isinstance(value, list | tuple):
        if depth_left <= 0:
            raise NestingTooDeep("the JSON value nests too deeply")
        return [_sanitize(item, depth_left - 1, scanner, scanned) for item in value]
    return value


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
            if isinstance(item, str) and item and (secret or _docker_auth(clean_key, item)):
                out[clean_key] = REDACTED
            else:
                out[clean_key] = redact_json(item)
        return out
    if isinstance(value, list):
        return [redact_json(item) for item in value]
    return value


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
    return clean, _credential_key(clean)


def _credential_key(key: str) -> bool:
    return _SECRET_KEY.fullmatch(key) is not None and not reference_name(key)


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


# --- cap_text -----------------------------------------------------------------------------------


ELISION_START = "…[truncated: "
# The marker as readers find it in a capped text: group 1 is the original size in characters.
ELISION_MARKER = re.compile(r"\n…\[truncated: (\d+) chars originally, [^\]\n]*\]…\n")


def elision_marker(original_chars: int, kept_head: int, kept_tail: int) -> str:
    omitted = original_chars - kept_head - kept_tail
    return (
        f"\n{ELISION_START}{original_chars} chars originally, {omitted} omitted, "
        f"kept first {kept_head} and last {kept_tail}]…\n"
    )


def cap_text(s: str, max_chars: int) -> str:
    """Keep the head and tail of `s` within `max_chars`, with a marker stating the original size.

    Text already within the cap is returned unchanged. The head gets two thirds of the room,
    because a tool's output usually says what it is at the start and how it ended at the end.
    """
    if len(s) <= max_chars:
        return s
    original = len(s)
    # The marker's own length depends on the numbers in it; size it with the widest values.
    room = max_chars - len(elision_marker(original, original, original))
    if room <= 0:
        return s[:max_chars]
    head = room * 2 // 3
    tail = room - head
    return s[:head] + elision_marker(original, head, tail) + (s[-tail:] if tail else "")


# --- the rules' version -------------------------------------------------------------------------


# Bump when code that decides what the rules leave changes (a replacement's body, _at_command,
# basic_credentials, how literals and gates select rules): the digest below sees only data.
_RULES_CODE_VERSION = 1


def _described(value: object) -> str:
    """What of a rule's pattern or replacement decides its output, as text."""
    if isinstance(value, re.Pattern):
        return f"{value.pattern!r}/{value.flags}"
    if isinstance(value, FunctionType):
        # Its name and what it closes over (`_keep_group("keep")`); its body is code.
        bound = [_described(cell.cell_contents) for cell in value.__closure__ or ()]
        return f"{value.__module__}.{value.__qualname__}{bound}"
    return repr(value)


def _rules_version() -> str:
    parts = [repr(_RULES_CODE_VERSION)]
    for literals, pattern, replacement in _RULES:
        gate = _RULE_GATES.get(pattern, "")
        parts += [repr(literals), _described(pattern), _described(replacement), gate]
    parts += [
        _described(pattern)
        for pattern in (_SECRET_KEY, _REFERENCE_NAME, _NAME_BEFORE, _PRIVATE_TAG, _MEMORY)
    ]
    parts += [repr(_PRIVATE_LITERALS), repr(_MEMORY_LITERALS)]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


# What a memory file's chunks were sanitized under (`memory_files.rules`): a sync re-chunks a file
# indexed under other rules, unchanged or not, so that a rule added since reaches its chunks.
# Derived from the rules themselves (patterns and flags, literals, gates, replacements), so that
# no change of a rule's data can forget to move it; a change of code bumps _RULES_CODE_VERSION.
RULES_VERSION = _rules_version()
