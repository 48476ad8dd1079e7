"""Rules generation 13 (privacy26). Credentials generation 12 kept readable, whole or in part: a
triple-quoted value holding a quote, padded with blanks, prefixed (`r`, `b`, `f`, `rb`), of
several lines, or shorter than four characters in capitals (`PASSWORD = \"\"\"abc\"\"\"` became
`PASSWORD = "[REDACTED]""abc\"\"\"`); a credential's list in a TOML inline table, or with a
comment among its lines. And the list rule, once one credential's list let it run on a long
text, ran Python for every `keys = [...]` line of it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.privacy import REDACTED, redact_secrets, redact_secrets_lines, sanitize_json
from app.privacy.lists import _LIST_PATTERNS
from tests.test_privacy import _assert_linear, assert_redacted_on_every_path

# `@` is each redaction.
TRIPLE_QUOTED = [
    # A quote inside, which does not close the string.
    ('password = """ab"cd"""', 'password = """@"""'),
    ("password = '''it\"s1x'''", "password = '''@'''"),
    ("api_key = '''k9X'q2mLp7'''", "api_key = '''@'''"),
    ('PASSWORD = """ab"cd"""', 'PASSWORD = """@"""'),
    ("PASSWORD = '''x'y'''", "PASSWORD = '''@'''"),
    # Fewer than four characters, in capitals: redacted as `PASSWORD = "abc"` is.
    ('PASSWORD = """abc"""', 'PASSWORD = """@"""'),
    ("DB_PASSWORD = '''ab'''", "DB_PASSWORD = '''@'''"),
    # Padded with blanks.
    ('password = """  hunter22  """', 'password = """@"""'),
    ('PASSWORD = """  hunter22  """', 'PASSWORD = """@"""'),
    ('password = """ \n  hunter22 \n """', 'password = """@"""'),
]


@pytest.mark.parametrize(("text", "expected"), TRIPLE_QUOTED)
def test_a_triple_quoted_credential_is_redacted_whole(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected, lines="\n" not in text)


PREFIXED = [
    ('password = r"""s3cr3t"""', 'password = r"""@"""'),
    ('PASSWORD = r"""s3cr3t"""', 'PASSWORD = r"""@"""'),
    ('password = r"s3cr3t99"', 'password = r"@"'),
    ('PASSWORD = R"s3cr3t99"', 'PASSWORD = R"@"'),
    ('token = b"abcd1234efgh"', 'token = b"@"'),
    ("TOKEN = b'abcd1234efgh'", "TOKEN = b'@'"),
    ('secret = f"abcd1234efgh"', 'secret = f"@"'),
    ('SECRET = F"abcd1234efgh"', 'SECRET = F"@"'),
    ('api_key = rb"k9Xq2mLp7Rt"', 'api_key = rb"@"'),
    ("api_key = Br'k9Xq2mLp7Rt'", "api_key = Br'@'"),
    ('secret_key = u"s3cr3t!x"', 'secret_key = u"@"'),
    # Text beside an f-string's references is the code's, and judged as any value.
    ('token = f"sk-live-{suffix}"', 'token = f"@"'),
    # A literal in an f-string's braces is the code's text, judged as any value (rev-privacy26:
    # any text in braces was taken for a reference).
    ("PASSWORD = f\"{'Tr0ub4dor3xq'}\"", 'PASSWORD = f"@"'),
    ("password = f\"{'Tr0ub4dor3xq'}\"", 'password = f"@"'),
    # A passphrase in a prefixed string.
    ('password = r"correct horse battery"', 'password = r"@"'),
    # Padded in one pair of quotes.
    ('password = "  hunter22  "', 'password = "@"'),
    ("password: ' hunter22'", "password: '@'"),
    # An escaped quote inside one pair of quotes does not close it (rev-privacy26).
    ('password = "ab\\"cd1234"', 'password = "@"'),
    ("password = 'ab\\'cd1234'", "password = '@'"),
    ('{"token": "x\\"9Kq2mLp7Rt"}', '{"token": "@"}'),
    ('PASSWORD = "ab\\"cd1234"', 'PASSWORD = "@"'),
    ('export DB_PASS="p\\"w9"', 'export DB_PASS="@"'),
]


# A value that follows a redacted one, or that holds a quote after its closing one: redacted
# whole, as before (the rules for the shapes above kept `AIza…`'s tail and `"x 1""`'s value).
STILL_REDACTED = [
    (
        'db = { private_key = "AIzaXQ4HxFb44ij1LXpaIPSp5vlWnCybVUz542Av1wW", x = 1 }',
        'db = { private_key = "@", x = 1 }',
    ),
    ('export DB_PASS="\'1 ]g5"" 2026', 'export DB_PASS="@"" 2026'),
]


@pytest.mark.parametrize(("text", "expected"), STILL_REDACTED)
def test_what_was_redacted_still_is(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


@pytest.mark.parametrize(("text", "expected"), PREFIXED)
def test_a_prefixed_or_padded_credential_is_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


# A key's body on several lines (base64 or hex, a word a line): redacted whole, its newlines
# kept after the placeholder in a markdown file.
MULTI_LINE = [
    (
        'private_key = """\nMIIEvQIBADANBgkqhkiG9w0B\nBKcwggSjAgEAAoIBAQC7VJTU\n"""',
        'private_key = """@"""',
    ),
    ('PRIVATE_KEY = """\nMIIEabc123\ndef456ghi\n"""', 'PRIVATE_KEY = """@"""'),
    (
        "signing_key = '''\n  a1b2c3d4e5f6\n  0718293a4b5c\n'''\nnext = 1\n",
        "signing_key = '''@'''\nnext = 1\n",
    ),
    ('password = """\nhunter22\nswordfish9"""', 'password = """@"""'),
]


@pytest.mark.parametrize(("text", "expected"), MULTI_LINE)
def test_a_multi_line_credential_is_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected, lines=False)
    lines = redact_secrets_lines(text)
    assert lines.startswith(expected.replace("@", REDACTED).split("\n", 1)[0])
    assert lines.count("\n") == text.count("\n")
    for secret in ("MII", "a1b2", "hunter"):
        assert secret not in lines


# What rev-privacy26 found of a key's body still in clear: its first line after the opening
# delimiter, blank lines among, before or after its lines, a line continuation after the
# delimiter, `\r` alone between lines; and two passwords a blank line apart.
_KEY_BODY = "Xq7mP2vL9kR4tZ8wN3bH6jC1yF5dG0sA2eU7iO4p"
_LETTERS_BODY = "qWgTzkPmRbXcVnJdLsHfYaUeKiOpMwNtBrGyEuQx"
MULTI_LINE_SHAPES = [
    ('private_key = """<s>\n<s>\n"""', 'private_key = """@"""'),
    ('private_key = """\n<s>\n\n<s>\n"""', 'private_key = """@"""'),
    ('private_key = """\n\n<s>\n<s>\n\n"""', 'private_key = """@"""'),
    ("SIGNING_KEY = '''\n  <s>\n   \n  <s>\n  '''", "SIGNING_KEY = '''@'''"),
    ('private_key = """\\\n<s>\n<s>\n"""', 'private_key = """@"""'),
    ('private_key = """\r<s>\r<s>\r"""', 'private_key = """@"""'),
    ('private_key = """\r\n<s>\r\n\r\n<s>\r\n"""', 'private_key = """@"""'),
    ('password = """\nhunter22\n\nswordfish9\n"""', 'password = """@"""'),
    # Lines of random letters alone are a key's, not a word of prose each (rev2-privacy26: kept
    # in clear when any line of letters counted as prose).
    ('token = """\nvAYmqgqUGnMB\nbobzjcUkCTGR\n"""', 'token = """@"""'),
    ('private_key = """\n<l>\n<l>\n"""', 'private_key = """@"""'),
    ('PRIVATE_KEY = """\n<l>\n<l>\n"""', 'PRIVATE_KEY = """@"""'),
]


@pytest.mark.parametrize(("text", "expected"), MULTI_LINE_SHAPES)
def test_a_key_body_of_any_lines_shape_is_redacted(text: str, expected: str) -> None:
    text = text.replace("<s>", _KEY_BODY).replace("<l>", _LETTERS_BODY)
    assert_redacted_on_every_path(text, expected, lines=False)
    lines = redact_secrets_lines(text)
    assert lines.startswith(expected.replace("@", REDACTED).split("\n", 1)[0])
    for secret in (_KEY_BODY, "hunter22", "swordfish9"):
        assert secret not in lines


LISTS = [
    # TOML inline tables.
    ('creds = { passwords = ["hunter2x"] }', 'creds = { passwords = ["@"] }'),
    (
        'db = { user = "app", api_keys = ["k1abc123", "k2abc456"], port = 5432 }',
        'db = { user = "app", api_keys = ["@", "@"], port = 5432 }',
    ),
    ("a.b = {tokens = ['zQ8pL2mNx7Rt4Kq9'], x = 1}", "a.b = {tokens = ['@'], x = 1}"),
    # The table's `}` on the next line, and a `}` in a string before the list (rev-privacy26).
    ('db = { passwords = ["hunter2x"]\n}', 'db = { passwords = ["@"]\n}'),
    ("db = { user = 'a}b', passwords = ['hunter2x'] }", "db = { user = 'a}b', passwords = ['@'] }"),
    # Comments among a multi-line list's lines.
    (
        'api_keys = [  # prod\n "k1abc123",\n "k2abc456",\n]',
        'api_keys = [  # prod\n "@",\n "@",\n]',
    ),
    (
        'api_keys = [\n  "k1abcdef", # first\n  "k2abcdef",\n]',
        'api_keys = [\n  "@", # first\n  "@",\n]',
    ),
    (
        "PASSWORDS = [\n  # don't share\n  'hunter2x',  # the old one's\n  'swordfish9',\n]",
        "PASSWORDS = [\n  # don't share\n  '@',  # the old one's\n  '@',\n]",
    ),
    (
        '"api_keys": [  # prod, "not a string"\n  "k1abcdef"\n]',
        '"api_keys": [  # prod, "not a string"\n  "@"\n]',
    ),
]


@pytest.mark.parametrize(("text", "expected"), LISTS)
def test_a_credentials_list_is_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


def test_the_new_shapes_in_a_json_string_are_redacted() -> None:
    value = {
        "content": 'PASSWORD = """ab"cd"""\ntoken = b"abcd1234efgh"\n',
        "toml": 'db = { passwords = ["hunter2x"] }',
    }
    assert sanitize_json(value) == {
        "content": f'PASSWORD = """{REDACTED}"""\ntoken = b"{REDACTED}"\n',
        "toml": f'db = {{ passwords = ["{REDACTED}"] }}',
    }


KEPT = [
    # Docstrings and prose, a quote in them or not.
    'def password(self) -> str:\n    """Return the user\'s "password"."""\n',
    'description = """ab"cd"""',
    'help = r"""s3cr3t"""',
    "name = b'abcd1234efgh'",
    'Use r"""...""" for a password holding a backslash.',
    # A phrase holding a quote is no passphrase, in small letters as in one pair of quotes.
    'password = """The user\'s "password"."""',
    # Several lines of prose under a credential's name: a help text.
    'password = """\nThe password of\nthe admin user.\n"""',
    'password = r"""\nEnter it twice.\n"""',
    # One word a line of prose is a phrase's, as on one line (rev-privacy26: the lines were
    # joined into one word, `Enterit`, and redacted).
    'password = """\n    Enter\n    it\n    """',
    'password = """Enter\nit twice."""',
    # Short, in small letters, as `password = "abc"` is.
    'password = """abc"""',
    "password = '''x'y'''",
    'password = r"abc"',
    'password = "  ab  "',
    # An f-string of references alone holds no credential.
    'secret = f"{secret_value}"',
    'SECRET = f"{secret_value}"',
    'token = f"{user}:{token}"',
    'password = F"""{password}"""',
    # A reference's index or a call without a literal in it is a reference's too.
    "secret = f\"{cfg['secret']}\"",
    'TOKEN = f"{env.get(name)}:{self.tokens[0]}"',
    # A sentence in an f-string.
    'token = f"Bearer {tok}"',
    # Code naming a password variable.
    "password = get_password(r'prompt: ')",
    'if password == r"\\d+":',
    're.compile(r"password")',
    # Lists that hold no credential: a name's, comments and all.
    'keys = [  # primary\n "id",\n "email",\n]',
    'db = { user = "app", names = ["hunter2x"] }',
    "opts = { passwords = [f(x)] }",
    # A list after an inline table's end is in a line of code, as it was.
    'db = { user = "app" }, passwords = ["hunter2x"], port = 1',
    # A list that neither the table's `,` nor its `}` follows is in a line of code.
    'x = {passwords = ["hunter2x"] if debug else []}',
    "api_keys = [  # none yet\n]",
]


@pytest.mark.parametrize("text", KEPT)
def test_what_is_no_credential_is_kept(text: str) -> None:
    assert_redacted_on_every_path(text, text)


@pytest.mark.parametrize(
    "text",
    ['"keys": ["a"]', "keys = ['name', 'email']", "x\nprimary_keys: [a1]", "FOREIGN_KEYS = ['x']"],
)
def test_a_list_under_a_bare_key_fails_the_pattern(text: str) -> None:
    # The pattern itself fails where `_listed_credentials` would let the list go, so that a long
    # text's `keys = [...]` lines cost no call of Python each once a credential's list lets the
    # rule run on it (bench/privacy_lists.py).
    assert not any(pattern.search(text) for pattern in _LIST_PATTERNS)


@pytest.mark.parametrize(
    "text",
    ['"apiKeys": ["a1"]', "api_keys = ['k1abc']", "secret__keys: [a1]", "x_é_keys: [a1]"],
)
def test_a_list_under_a_credential_key_matches_the_pattern(text: str) -> None:
    assert any(pattern.search(text) for pattern in _LIST_PATTERNS)


# A triple-quoted value's blank and newline runs, around a word or a phrase, unclosed: rev-privacy26
# found the runs on either side of an optional newline splitting the same blanks (`"""` and 800
# blanks took over a minute; a capture's `sanitize_json` and the worker's rescan ran it too).
# Short texts of many lines (the scan's regex path) and one long text (hyperscan's gates) alike.
_QUARTER = 62_500
_TRIPLE_RUNS: list[Callable[[int], str]] = [
    lambda n: 'password = """' + " " * _QUARTER * n + "z",
    lambda n: 'PASSWORD = """' + " " * _QUARTER * n + "z",
    lambda n: "api_key = '''" + " \t" * (_QUARTER // 2) * n + "z",
    lambda n: 'password = """abcd' + " " * _QUARTER * n + "z",
    lambda n: 'PASSWORD = """abcd' + " " * _QUARTER * n + "z",
    lambda n: 'password = """ab cd' + " " * _QUARTER * n + "z",
    lambda n: 'password = """' + "\n" * _QUARTER * n + "z",
    lambda n: 'PASSWORD = """' + " \r\n" * (_QUARTER // 3) * n + "z",
    lambda n: 'private_key = """\n' + "abcd \n\n" * (_QUARTER // 7) * n + "z",
    lambda n: 'private_key = """abcd' + "\n" * _QUARTER * n + "abcd",
    lambda n: 'password = """' + "ab" * (_QUARTER // 2) * n,
    lambda n: ('password = """' + " " * 200 + "z\n") * (_QUARTER // 216) * n,
    lambda n: ('PASSWORD = """abcd' + " " * 200 + "z\n") * (_QUARTER // 220) * n,
    lambda n: ('signing_key = """\n' + "a1\n\n" * 50 + " " * 50 + "\n") * (_QUARTER // 320) * n,
]


@pytest.mark.parametrize("make", _TRIPLE_RUNS)
def test_a_triple_quoted_values_runs_cost_linear_work(make: Callable[[int], str]) -> None:
    for judge in (redact_secrets, redact_secrets_lines):
        _assert_linear(lambda n, judge=judge: judge(make(n)))
