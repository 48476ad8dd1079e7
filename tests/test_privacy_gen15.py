"""Rules generation 15 (privacy28): what generation 14 kept readable, or redacted past the
value, near the shapes it redacts."""

from __future__ import annotations

import base64
import textwrap
from collections.abc import Callable

import pytest

from app.privacy import redact_secrets, redact_secrets_lines
from app.privacy.assignments import _CONFIG_AFTER_BREAK
from app.privacy.engine import _SCANNER, _rules_for
from tests.test_privacy import _assert_linear, assert_redacted_on_every_path

# `@` is each redaction.
# A no-break space or another Unicode blank in a line's indent, a list's `- ` or `export `: a
# rich-text paste leaves them (generation 14 read spaces and tabs alone there).
UNICODE_INDENTS = [
    ("\u00a0password: hunter2x9", "\u00a0password: @"),
    ("\u00a0\u00a0api_key = k9Xq2mLp7Rtz", "\u00a0\u00a0api_key = @"),
    ("x: 1\n\u3000password: hunter2x9", "x: 1\n\u3000password: @"),
    ("\t\u00a0db_password: swordfish", "\t\u00a0db_password: @"),
    ("\u2003-\u00a0token: k9Xq2mLp7Rtz", "\u2003-\u00a0token: @"),
    ("x: 1\u2028\u00a0password: hunter2x9", "x: 1\u2028\u00a0password: @"),
    ("\u00a0api_keys = ['k9Xq2mLp7Rtz']", "\u00a0api_keys = ['@']"),
    ("\u00a0- passwords: [hunter2x9, s3cr3t9x]", "\u00a0- passwords: [@, @]"),
]


# JavaScript's and TypeScript's declared lists: `const`, `let`, `var` (exported too) before the
# name, a `;` after the list, a `//` comment after an item or the list.
DECLARED_LISTS = [
    (
        "const tokens = ['k9Xq2mLp7Rtz', // ci\n  'k2Xq2mLp7Rtz',\n];",
        "const tokens = ['@', // ci\n  '@',\n];",
    ),
    ("const tokens = ['k9Xq2mLp7Rtz', 'k2Xq2mLp7Rtz'];", "const tokens = ['@', '@'];"),
    ("export const apiKeys = ['k9Xq2mLp7Rtz']; // prod", "export const apiKeys = ['@']; // prod"),
    ('  let passwords = ["hunter2x9"]', '  let passwords = ["@"]'),
    ("var secrets = ['s3cr3t-9x'];", "var secrets = ['@'];"),
]


# A client run as a command after another line break than `\n` (a terminal's `\r`, a pasted
# U+2028, `\v`): every command rule, as generation 14 read those breaks in the others.
COMMANDS_AFTER_BREAKS = [
    ("ls\u2028mysql -u root -phunter2x9", "ls\u2028mysql -u root -p@"),
    ("ls\rmysqldump -u root -phunter2x9 shop", "ls\rmysqldump -u root -p@ shop"),
    ("x\u2029$ mariadb -u r -phunter2x9", "x\u2029$ mariadb -u r -p@"),
    ("ls\u2028docker login -u me -p hunter2x9", "ls\u2028docker login -u me -p @"),
    ("ls\x0bpodman login -u me -p hunter2x9", "ls\x0bpodman login -u me -p @"),
    ("ls\x0cskopeo login -u me -p hunter2x9 r.io", "ls\x0cskopeo login -u me -p @ r.io"),
    ("echo hi\x85redis-cli -a hunter2x9", "echo hi\x85redis-cli -a @"),
    ("echo hi\u2028sudo redis-cli --pass hunter2x9", "echo hi\u2028sudo redis-cli --pass @"),
]


# A single-quoted `.env` value whose `\'` a word's end follows: a shell reads the quote as the
# value's close (no escape in single quotes), and runs what follows.
SHELL_CLOSED_QUOTES = [
    ("PASSWORD='abc\\' ; echo 'hi'", "PASSWORD='@' ; echo 'hi'"),
    ("PASSWORD='abc\\' && ls 'x'", "PASSWORD='@' && ls 'x'"),
    ("PASSWORD='abc\\'|cat 'x'", "PASSWORD='@'|cat 'x'"),
    ("PASSWORD='a\\'b\\' ; echo 'hi'", "PASSWORD='@' ; echo 'hi'"),
    ("PASSWORD='\\' ; echo 'hi'", "PASSWORD='@' ; echo 'hi'"),
]


# A `\'` that a blank or a bracket follows, and no shell operator or line end after the blanks:
# dotenv readers (python-dotenv, node's dotenv) take it as an escape and read on. The first
# generation 15 closed the value there and kept its tail in clear.
DOTENV_ESCAPED_QUOTES = [
    ("PASSWORD='\\' hunter2x9'", "PASSWORD='@'"),
    ("export DB_PASSWORD='p@ss\\' w0rd'", "export DB_PASSWORD='@'"),
    ("PASSWORD='ab\\' cd1234'", "PASSWORD='@'"),
    ("PASSWORD='s3cr3t\\'\tmore9'", "PASSWORD='@'"),
    ("PASSWORD='p@ss\\')rest9'", "PASSWORD='@'"),
    ("PASSWORD='hun ter2\\' x9'\r\n", "PASSWORD='@'\r\n"),
    ("PASSWORD='p@ss\\'(rest9'", "PASSWORD='@'"),
    ("PASSWORD='p@ss\\' <rest9'", "PASSWORD='@'"),
    # A blank before the operator, and every line break, still close it.
    ("PASSWORD='abc\\'  ;echo 'hi'", "PASSWORD='@'  ;echo 'hi'"),
    ("PASSWORD='abc\\'\r\nls 'x'", "PASSWORD='@'\r\nls 'x'"),
    ("PASSWORD='abc\\'\rls 'x'", "PASSWORD='@'\rls 'x'"),
    ("PASSWORD='abc\\'\x0bls 'x'", "PASSWORD='@'\x0bls 'x'"),
    ("PASSWORD='abc\\'\x0cls 'x'", "PASSWORD='@'\x0cls 'x'"),
    ("PASSWORD='abc\\' \x85ls 'x'", "PASSWORD='@' \x85ls 'x'"),
    ("PASSWORD='abc\\'\u2028ls 'x'", "PASSWORD='@'\u2028ls 'x'"),
    ("PASSWORD='abc\\'\u2029ls 'x'", "PASSWORD='@'\u2029ls 'x'"),
    ("PASSWORD='abc\\'\nls 'x'", "PASSWORD='@'\nls 'x'"),
]


# curl's `-u user:password`, the user kept.
CURL_USERS = [
    ("curl -u admin:hunter2x9 https://x", "curl -u admin:@ https://x"),
    ("curl --user admin:hunter2x9 https://x", "curl --user admin:@ https://x"),
    ("curl -s -u 'me:s3 cret' https://x", "curl -s -u 'me:@' https://x"),
    ("curl -uadmin:hunter2x9 https://x", "curl -uadmin:@ https://x"),
    ("curl --user=admin:hunter2x9 https://x", "curl --user=admin:@ https://x"),
    ("$ curl -X POST -u api:key-abcdef123 https://x", "$ curl -X POST -u api:@ https://x"),
    ('ls | curl -u "$USER:s3cr3t9" x', 'ls | curl -u "$USER:@" x'),
    # An escaped quote in double quotes does not close the value, in the user nor the password.
    ('curl -u "admin:pa\\"ss" https://x', 'curl -u "admin:@" https://x'),
    ('curl -u "admin:pa\\"ss w0rd" https://x', 'curl -u "admin:@" https://x'),
    ('curl -u "ad\\"min:hunter2x9" https://x', 'curl -u "ad\\"min:@" https://x'),
    # A URL's user part after a scheme-less user is still a user's.
    ("curl -u admin:http//x9 https://x", "curl -u admin:@ https://x"),
]


# GitLab's token header, as its API documentation's `curl -H` writes it.
GITLAB_HEADERS = [
    (
        'curl -H "PRIVATE-TOKEN: abcdEFGH1234ijklMNOP" https://x',
        'curl -H "PRIVATE-TOKEN: @" https://x',
    ),
    ("wget --header='Private-Token: abcdEFGH1234' x", "wget --header='Private-Token: @' x"),
    ('curl --header "private-token: abcdEFGH1234" x', 'curl --header "private-token: @" x'),
]


# npm's access tokens by their shape, under any name or none.
NPM_TOKENS = [
    (
        "npm config set //registry.npmjs.org/:_authToken npm_aB3dEfGh1JkLmN0pQrStUvWxYz0123456789",
        "npm config set //registry.npmjs.org/:_authToken @",
    ),
    ("NODE_AUTH: npm_aB3dEfGh1JkLmN0pQrStUvWxYz0123456789 (ci)", "NODE_AUTH: @ (ci)"),
]


def _encoded(kind: str, body: str = "MIIEowIBAAKCAQEAxyz0123456789abcdef") -> str:
    """A PEM block of `kind` (`RSA PRIVATE KEY`, `CERTIFICATE`) in base64, on one line."""
    pem = f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n"
    return base64.b64encode(pem.encode()).decode()


# A private key in base64, as kubeconfig's `client-key-data` and a Kubernetes Secret's `tls.key`
# hold it: kept in clear under any name by generation 14. Wrapped at 76 characters a line as
# `base64` writes it, the lines after the first go too.
_WRAPPED_KEY = "\n".join(textwrap.wrap(_encoded("PRIVATE KEY", "A" * 150), 76))
ENCODED_KEYS = [
    (f"    client-key-data: {_encoded('RSA PRIVATE KEY')}", "    client-key-data: @"),
    (f'"client-key-data": "{_encoded("EC PRIVATE KEY")}"', '"client-key-data": "@"'),
    (f"  tls.key: {_encoded('PRIVATE KEY')}\n  tls.crt: x", "  tls.key: @\n  tls.crt: x"),
    (f"key: {_encoded('OPENSSH PRIVATE KEY')} # ci", "key: @ # ci"),
    (f"tls.key: {_encoded('ENCRYPTED PRIVATE KEY')}", "tls.key: @"),
    (f"tls.key: {_encoded('RSA PRIVATE KEY')}\ntls.crt: x", "tls.key: @\ntls.crt: x"),
]


def test_a_wrapped_base64_private_key_is_redacted_whole() -> None:
    text = f"tls.key: {_WRAPPED_KEY}\nnext: 1"
    assert _WRAPPED_KEY.count("\n") > 2
    assert_redacted_on_every_path(text, "tls.key: @\nnext: 1", lines=False)
    lines = redact_secrets_lines(text)
    assert lines == "tls.key: [REDACTED]" + "\n" * (text.count("\n") - 1) + "\nnext: 1"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        *UNICODE_INDENTS,
        *DECLARED_LISTS,
        *COMMANDS_AFTER_BREAKS,
        *SHELL_CLOSED_QUOTES,
        *DOTENV_ESCAPED_QUOTES,
        *ENCODED_KEYS,
        *CURL_USERS,
        *GITLAB_HEADERS,
        *NPM_TOKENS,
    ],
)
def test_what_generation_14_kept_or_over_redacted_is_redacted_exactly(
    text: str, expected: str
) -> None:
    assert_redacted_on_every_path(text, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # An escaped single quote that a word's character follows reads on, as in generation 14.
        ("PASSWORD='ab\\'cd1234'", "PASSWORD='@'"),
        ("export DB_PASS='p\\'w9'", "export DB_PASS='@'"),
        ("API_TOKEN='x\\'9Kq2mLp7Rt' # prod", "API_TOKEN='@' # prod"),
        ("PASSWORD='abc\\'", "PASSWORD='@'"),
        # The `.env` rule reads a blank after `export`, as before.
        ("export\u00a0DB_TOKEN=k9Xq2mLp7Rtz", "export\u00a0DB_TOKEN=@"),
        # A list's comment after it, as before.
        ("api_keys = ['k9Xq2mLp7Rtz']  # prod", "api_keys = ['@']  # prod"),
        # A command's other option than its client's, after a break.
        ("ls\x0bpodman login -u me --password hunter2x9", "ls\x0bpodman login -u me --password @"),
    ],
)
def test_what_generation_14_redacted_still_is(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


KEPT: list[str] = [
    # Code and types after a Unicode indent, as after spaces.
    "\u00a0password: str",
    "\u00a0password = getpass",
    "\u3000token: Optional[str] = None",
    # Lists that are code's or name things, declared or not.
    "const keys = ['name', 'email'];",
    "const tokens = ['<s>', '</s>'];",
    "foo(tokens = ['k9Xq2mLp7Rtz'])",
    "tokens = ['k9Xq2mLp7Rtz'] + more",
    "const tokens = ['k9Xq2mLp7Rtz'].map(f);",
    "constant tokens = ['k9Xq2mLp7Rtz'];",
    # A client's name as a path part or an option after a break, as after `\n`.
    "find /var/lib/mysql\u2028-print",
    "ls\rfind /var/lib/mysql -print",
    "x\u2028mysql -u root -p shop",
    # A certificate in base64 is public (kubeconfig's `certificate-authority-data`), and so is a
    # run that only starts as one (`xLS0t…`) or holds too little to tell.
    f"    certificate-authority-data: {_encoded('CERTIFICATE')}",
    f"x{_encoded('RSA PRIVATE KEY')}",
    "LS0tLS1CRUdJTi",
    # curl's user alone (it prompts), a reference, prose.
    "curl -u admin https://x",
    'curl -u "$USER:$PASS" https://x',
    "curl -u admin:${PASS} https://x",
    "see curl docs: use -u user:pass for basic auth",
    "curl -u 'me:' https://x",
    # A URL after `-u` (its user missing): a scheme, no user's password.
    "curl -u https://example.com",
    "curl -u http://example.com/path -X GET",
    'curl -u "https://example.com"',
    "curl -u 'ftp://files.example.com'",
    # The header named in prose or documented, as the other token headers.
    "send the PRIVATE-TOKEN: header with each request",
    "PRIVATE-TOKEN: <your_access_token>",
    "PRIVATE-TOKEN: $GITLAB_TOKEN",
    # npm's settings' names, which `_` continues.
    "npm_config_cache_dir_for_the_current_user_abc123",
    "echo $npm_package_version",
]


@pytest.mark.parametrize("text", KEPT)
def test_what_is_no_credential_is_kept(text: str) -> None:
    assert_redacted_on_every_path(text, text)


# Hostile inputs for each pattern this generation widened: linear work (`_assert_linear`).
_QUARTER = 62_500
_LINEAR: list[Callable[[int], str]] = [
    lambda n: "\u00a0" * _QUARTER * n + "password",
    lambda n: "\u00a0" * _QUARTER * n + "- password: x",
    lambda n: "\u2028" + "\u00a0" * _QUARTER * n + "password:",
    lambda n: ("\u00a0password: a1\n") * (_QUARTER // 14) * n,
    lambda n: "\u00a0" * _QUARTER * n + "api_keys = ['k1abcdef']",
    lambda n: "const tokens = ['k1abcdef']" + " " * _QUARTER * n + ";x",
    lambda n: "const tokens = ['k1abcdef'];\n" * (_QUARTER // 29) * n,
    lambda n: "x\u2028mysql -p" * (_QUARTER // 10) * n,
    lambda n: "\rsudo " + "a " * (_QUARTER // 2) * n + "mysql -px",
    lambda n: "PASSWORD='" + "\\'" * (_QUARTER // 2) * n + " ",
    lambda n: "PASSWORD='a\\' " * (_QUARTER // 14) * n,
    lambda n: "LS0tLS1CRUdJTi" * (_QUARTER // 14) * n,
    lambda n: "LS0tLS1CRUdJTi " * (_QUARTER // 15) * n,
    lambda n: "k: LS0tLS1CRUdJTiBQUklW" + ("A" * 60 + "\n") * (_QUARTER // 61) * n,
    lambda n: "curl " * (_QUARTER // 5) * n + "-u a:b",
    lambda n: "curl -u '" + "a" * _QUARTER * n,
    lambda n: 'curl -u "a:' + '\\"' * _QUARTER * n,
    lambda n: "curl -u 'a:" + "b" * _QUARTER * n,
    lambda n: "PRIVATE-TOKEN:" + " " * _QUARTER * n + "x",
    lambda n: "PRIVATE-TOKEN: " * (_QUARTER // 15) * n,
    lambda n: "npm_" * (_QUARTER // 4) * n,
]


@pytest.mark.parametrize("make", _LINEAR)
def test_the_widened_patterns_cost_linear_work(make: Callable[[int], str]) -> None:
    for judge in (redact_secrets, redact_secrets_lines):
        _assert_linear(lambda n, judge=judge: judge(make(n)))


# Longer than the texts whose gates the scanner does not test (`textscan.SHORT_TEXT`).
_RULER = ("#" + "-" * 70 + "\n") * 4


def _runs_after_break_rule(text: str) -> bool:
    return any(pattern is _CONFIG_AFTER_BREAK for pattern, _ in _rules_for(_SCANNER.present(text)))


# A progress bar redraws its line with `\r`; a credential's name elsewhere, on a `\n` line, is the
# unquoted rule's alone. The rule after a one-byte break or NEL runs only when that break's line
# holds the name (the first generation 15 ran it on any break with any name: ~45x on 426 KB).
@pytest.mark.parametrize(
    "text",
    [
        ("\r" + "x" * 70) * 50 + "\npassword: hunter2x9",
        _RULER + "50%\x0b60%\x0c70%\x85done\nAPI_KEY=k9Xq2mLp7Rtz",
        _RULER + "a\x1eb\npassword: hunter2x9",
    ],
)
def test_a_short_break_without_a_credential_on_its_line_runs_no_after_break_rule(
    text: str,
) -> None:
    assert not _runs_after_break_rule(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50%\rpassword: hunter2x9", "50%\rpassword: @"),
        ("ok\x85API_KEY=k9Xq2mLp7Rtz", "ok\x85API_KEY=@"),
        ("ok\u2028password: hunter2x9", "ok\u2028password: @"),
        ("ok\u2029export DB_TOKEN=k9Xq2mLp7Rtz", "ok\u2029export DB_TOKEN=@"),
    ],
)
def test_a_break_before_a_credential_still_runs_the_after_break_rule(
    text: str, expected: str
) -> None:
    assert _runs_after_break_rule(_RULER + text)
    assert_redacted_on_every_path(_RULER + text, _RULER + expected)


# Under `tokens` or a word making no credential of them (`max_tokens`), a list is let go early
# when its items hold no run of 16 non-blanks nor of 10 token characters (`lists._TOKEN_RUN`):
# the shortest of a token's shape, each alone in its list, pin that edge.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max_tokens: [a1/b2+c3/d4=e5/f]", "max_tokens: [@]"),
        ("tokens: [a1/b2+c3/d4=e5/f]", "tokens: [@]"),
        ("tokens: [x, a1/b2+c3/d4=e5/f]", "tokens: [x, @]"),
        ("max_tokens = ['Xk9qLm2Pz7']", "max_tokens = ['@']"),
        ("tokens: ['Xk9qLm2Pz7']", "tokens: ['@']"),
        ("max_tokens: [Xk9qLm2Pz7]", "max_tokens: [@]"),
    ],
)
def test_the_shortest_token_under_tokens_is_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)
