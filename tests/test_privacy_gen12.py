"""Rules generation 12 (privacy25b). A TOML (or Python) triple-quoted string under a credential's
name stayed in clear, where the same value in one pair of quotes is redacted: the quoted rule's
value opens with one quote and a value of four characters, which `\"\"\"` is not; in capitals the
`.env` rule redacted the empty `""` the delimiter opens with and left the password after it."""

from __future__ import annotations

import pytest

from app.privacy import REDACTED, redact_secrets_lines, sanitize_json
from tests.test_privacy import assert_redacted_on_every_path

ONE_LINE = [
    ('password = """hunter2x"""', 'password = """@"""'),
    ("password = '''hunter2x'''", "password = '''@'''"),
    ('db_password = """hunter2x"""', 'db_password = """@"""'),
    ('api_key = """k9Xq2mLp7Rt"""', 'api_key = """@"""'),
    ('secret = """s3cr3t!x"""', 'secret = """@"""'),
    ('"password": """hunter2x"""', '"password": """@"""'),
    ('PASSWORD = """hunter2x"""', 'PASSWORD = """@"""'),
    ("DB_PASSWORD = '''hunter2x'''", "DB_PASSWORD = '''@'''"),
    # A passphrase, as `password = "correct horse battery"` is.
    ('password = """correct horse battery"""', 'password = """@"""'),
    # In a TOML table, among other keys.
    (
        '[database]\nuser = "bob"\npassword = """hunter2x"""\nport = 5432\n',
        '[database]\nuser = "bob"\npassword = """@"""\nport = 5432\n',
    ),
]


@pytest.mark.parametrize(("text", "expected"), ONE_LINE)
def test_a_triple_quoted_credential_is_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


# TOML trims the newline after the opening delimiter: the value is on the line after it.
MULTI_LINE = [
    ('password = """\nhunter2x\n"""', 'password = """@"""'),
    ("password = '''\nhunter2x\n'''", "password = '''@'''"),
    ('password = """\r\nhunter2x\r\n"""', 'password = """@"""'),
    ('password = """\nhunter2x"""', 'password = """@"""'),
    ('TOKEN = """\nghx9Qm2Lp7Rt4Kz\n"""\nnext = 1\n', 'TOKEN = """@"""\nnext = 1\n'),
]


@pytest.mark.parametrize(("text", "expected"), MULTI_LINE)
def test_a_multi_line_credential_is_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected, lines=False)
    # A markdown file keeps its line numbers: the value's newlines follow the placeholder.
    redacted = expected.replace("@", REDACTED)
    first_line = redacted.split("\n", 1)[0]
    assert redact_secrets_lines(text).startswith(first_line)
    assert redact_secrets_lines(text).count("\n") == text.count("\n")
    assert "hunter2x" not in redact_secrets_lines(text)


def test_a_triple_quoted_credential_in_a_json_string_is_redacted() -> None:
    value = {"content": 'password = """hunter2x"""\n', "toml": "token = '''\nhunter2x\n'''"}
    assert sanitize_json(value) == {
        "content": f'password = """{REDACTED}"""\n',
        "toml": f"token = '''{REDACTED}'''",
    }


KEPT = [
    # Python's docstrings, mentioning a password or not.
    '"""Return the password."""',
    'def password(self) -> str:\n    """Return the password."""\n    return self._password\n',
    'def get_token():\n    """\n    Fetch the token.\n    """\n',
    # A TOML key that names no credential.
    'description = """hunter2x"""',
    'description = """\nThe password of the admin user.\n"""',
    "name = '''hunter2x'''",
    # Prose about passwords and triple quotes.
    'Use """ for the password if it holds a quote.',
    "The password field takes ''' or \"\"\" strings in TOML.",
    # A sentence, a placeholder or a reference under a credential's name, as in one pair of quotes.
    'password = """Enter your password here"""',
    'password = """your_password"""',
    'password = """<your-password>"""',
    'API_KEY = """\nyour_api_key\n"""',
    'password = """\n"""',
    'password = """abc"""',
    # A multi-line text of several lines under a credential's name: not a value of one line.
    'password_help = """\nYour password must be\nat least 12 characters.\n"""',
]


@pytest.mark.parametrize("text", KEPT)
def test_a_triple_quoted_text_that_is_no_credential_is_kept(text: str) -> None:
    assert_redacted_on_every_path(text, text)
