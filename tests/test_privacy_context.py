"""Credentials the text rules kept through generation 5 (privacy21): each was stored in clear,
told from code by the context the text carries (an INI section, a connection or query string's
next key), by the option's spelling, or kept as a placeholder that is no secret."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from app.privacy import (
    REDACTED,
    redact_json,
    redact_json_text,
    redact_secrets,
    redact_secrets_lines,
    sanitize_json,
)
from app.textscan import SHORT_TEXT
from tests.test_privacy import _assert_linear, assert_redacted_on_every_path

REDACTED_IN_CONTEXT = [
    # An INI file: `[section]` above, and only keys, comments and blank lines between.
    ("[db]\nhost = localhost\npassword = swordfish\n", "[db]\nhost = localhost\npassword = @\n"),
    (
        "[client]\n; the app's\n\nuser = app\npassword = letmein",
        "[client]\n; the app's\n\nuser = app\npassword = @",
    ),
    ('[remote "origin"]\n\ttoken = swordfish', '[remote "origin"]\n\ttoken = @'),
    ("[db]\r\npassword = swordfish\r\n", "[db]\r\npassword = @\r\n"),
    ("[db]\npassword: Swordfish", "[db]\npassword: @"),
    # A plain word mid-line, with a connection or query string's next key after it.
    ("host=db; password=swordfish; user=bob", "host=db; password=@; user=bob"),
    ("Server=db;Password=swordfish;User Id=app", "Server=db;Password=@;User Id=app"),
    ("host=db password=swordfish user=bob", "host=db password=@ user=bob"),
    ("https://x.com/a?token=swordfish&x=1", "https://x.com/a?token=@&x=1"),
    ("https://x.com/a?x=1&api_key=abc123", "https://x.com/a?x=1&api_key=@"),
    (
        "GET /cb?code=1&access_token=ya1b2c3d4&state=s HTTP/1.1",
        "GET /cb?code=1&access_token=@&state=s HTTP/1.1",
    ),
    ("wss://h/ws?TOKEN=swordfish", "wss://h/ws?TOKEN=@"),
    # Options spelled in capitals, or with a `_` before `pass`.
    ("--API-TOKEN x1y2z3", "--API-TOKEN @"),
    ("--API_KEY swordfish", "--API_KEY @"),
    ("--db_pass hunter2", "--db_pass @"),
    ("--DB-PASS=hunter2", "--DB-PASS=@"),
    ("--db-pass hunter2", "--db-pass @"),
    # `.env` values stop at a JSON-escaped newline (a transcript's text seen raw), not swallow
    # the lines after.
    ("API_KEY=abc123\\nBASE_URL=https://x", "API_KEY=@\\nBASE_URL=https://x"),
    # Not placeholders: a password may be `changeme`, a word with digits, or `your` glued on.
    ("SECRET=changeme", "SECRET=@"),
    ("API_KEY=your_key_123", "API_KEY=@"),
    ("PASSWORD=yourpassword", "PASSWORD=@"),
]


@pytest.mark.parametrize(("text", "expected"), REDACTED_IN_CONTEXT)
def test_credentials_told_by_their_context_are_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


KEPT_IN_CONTEXT = [
    # Code: no INI section above, or a line no INI file holds between.
    "password = swordfish",
    "class Config:\n    password = getpass",
    "[db]\nx = f(y)\npassword = getpass",
    "[db]\ndef f():\n    token = Error",
    "items = [\n    [a]\n]\nif x:\n    password = value",
    # Types and kinds under names that are not a password's.
    "token: Name",
    "secret: Opaque",
    "client_secret: Swordfish",
    "password: Password",
    "password: SecretStr",
    "password: Optional",
    # Outside an INI section, a capitalised word is a type or prose under a password too.
    "password: Swordfish",
    "passphrase: Correcthorse",
    # Code passing a word, and a word with no next key after it.
    "f(password=password, user=user)",
    "conn(password=secret)",
    "char *password=buf;",
    "password=buf;\nlen=strlen(buf);",
    "if password=='x' and user=bob",
    # Query strings' references and placeholders.
    "https://x.com/a?token={token}&x=1",
    "https://x.com/a?token=%s&x=1",
    "https://x.com/a?token=YOUR_TOKEN&x=1",
    "https://x.com/a?page_token=2&x=1",
    "https://x.com/a?token=xxxx",
    "https://x.com/a?token=<token>&x=1",
    'url = "https://x.com/a?token=" + token',
    "https://x.com/a?max_tokens=4096&key=value",
    "https://x.com/a?token=expired",
    # Placeholders: no secret.
    "API_KEY=your_api_key",
    "API_KEY=<your-api-key>",
    "DISCORD_BOT_TOKEN=your_bot_token",
    "export GITHUB_TOKEN=your-github-token-here",
    'API_KEY="your_api_key"',
    '"api_key": "your_api_key"',
    "DISCORD_BOT_TOKEN=your_bot_token\\nAPI_KEY=your_api_key\\nBASE_URL=https://api.openai.com/v1",
    # Option placeholders, in capitals too.
    "--API-TOKEN API_TOKEN",
    "--DB_PASS $PW",
    # A plain word under a `pass` name is kept, as in `db_pass: swordfish` (`last_pass: done`).
    "--db_pass swordfish",
]


@pytest.mark.parametrize("text", KEPT_IN_CONTEXT)
def test_code_references_and_placeholders_in_context_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text
    assert redact_secrets_lines(text) == text


# The JSON rule agrees where it applies: a placeholder is kept under every name, a password in a
# capitalised word or under `db_pass` is redacted.
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"API_KEY": "your_api_key"}, {"API_KEY": "your_api_key"}),
        ({"apiKey": "<your-api-key>"}, {"apiKey": "<your-api-key>"}),
        ({"apiKeys": ["your_api_key"]}, {"apiKeys": ["your_api_key"]}),
        ({"API_KEY": "your_key_123"}, {"API_KEY": REDACTED}),
        ({"password": "Swordfish"}, {"password": REDACTED}),
        ({"db_pass": "swordfish"}, {"db_pass": REDACTED}),
    ],
)
def test_the_json_rule_agrees(value: dict[str, object], expected: dict[str, object]) -> None:
    assert sanitize_json(value) == expected
    assert redact_json(value) == expected
    if not isinstance(next(iter(value.values())), list):  # a list is redact_json_text's limit
        assert json.loads(redact_json_text(json.dumps(value))) == expected


# In a JSON string, a query string's or a connection string's password as in text.
def test_json_strings_hold_the_text_rules() -> None:
    value = {
        "url": "https://x.com/a?token=swordfish&x=1",
        "dsn": "host=db;password=swordfish;user=bob",
    }
    expected = {
        "url": f"https://x.com/a?token={REDACTED}&x=1",
        "dsn": f"host=db;password={REDACTED};user=bob",
    }
    assert sanitize_json(value) == expected
    assert redact_json(value) == expected
    assert json.loads(redact_json_text(json.dumps(value))) == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "[db]\n" + "password = swordfish\n" * 1_563 * n,
        lambda n: "[db]\n" + "host = x\n" * 6_250 * n + "password = swordfish\n",
        lambda n: "[db]\n" + "[x]\n" * 15_625 * n + "password = swordfish\n",
        lambda n: "password = swordfish\n" * 1_563 * n,
        lambda n: "?token=swordfish&x=1" * 3_125 * n,
        lambda n: "&" * 62_500 * n + "token=x1",
        lambda n: "?" + "a" * 62_500 * n + "token=x1",
        lambda n: "password=swordfish " * 3_125 * n,
        lambda n: "password=swordfish" + " " * 62_500 * n + "x",
        lambda n: "password=swordfish;" + " " * 62_500 * n + "x",
        lambda n: "--API-TOKEN x1 " * 4_000 * n,
        lambda n: "API_KEY=" + "a\\" * 31_250 * n,
        # fixprivacy21: the connection key looked for before each `password=`, `<…>` values.
        lambda n: "host=db password=swordfish user=bob " * 1_750 * n,
        lambda n: ("host=db " * 25 + "password=swordfish user=bob ") * 250 * n,
        lambda n: "PASSWORD=<" + "a " * 31_250 * n,
        lambda n: "password: " + "<" * 62_500 * n,
        lambda n: "PASSWORD=<hunter>\n" * 3_500 * n,
    ],
)
def test_the_privacy21_rules_cost_linear_work_on_a_quarter_megabyte(
    make: Callable[[int], str],
) -> None:
    for judge in (redact_secrets, redact_secrets_lines):
        _assert_linear(lambda n, judge=judge: judge(make(n)))


# --- fixprivacy21: generation 6's false positives and disagreements ------------------------------
# A capitalised plain word under a password's name is a type, a column's kind or prose as often as
# a password (generation 5 kept it, and so does generation 6 now); in an INI section it is one.
CAPITALISED_KEPT = [
    *(f"password: {word}" for word in ("Never", "Sequence", "Varchar", "Hash", "Column")),
    *(f"password: {word}" for word in ("Field", "Blob")),
    *(f"Password: {word}" for word in ("Strong", "Weak", "Correct", "Good", "Leaked")),
    *(f"Password: {word}" for word in ("Compromised", "Locked", "Removed", "Keychain", "Vault")),
    "- password: Strong",
    "  db_password: Letmein",
]


@pytest.mark.parametrize("text", CAPITALISED_KEPT)
def test_a_capitalised_word_under_a_password_name_is_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text
    assert redact_secrets_lines(text) == text


# One-line code with an assignment after a `;` or a blank: no connection string's next key.
ONE_LINE_CODE = [
    "password=input; user=get_user();",
    "for (i=0; password=next; i=i+1)",
    "opts.password=newpass; opts.user=name;",
    "password=getpass; user=input",
    "local password=readpass; local user=readuser",
    "password=swordfish; user=bob",
    "password=next user=bob",
]


@pytest.mark.parametrize("text", ONE_LINE_CODE)
def test_one_line_code_is_no_connection_string(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text
    assert redact_secrets_lines(text) == text


# A placeholder is lower case and says only what the name does (`your_api_key`,
# `your_token_here`, `<your-api-key>`, `<api key>`): anything else under the name may be a
# password, and is redacted on every path, text and JSON alike.
@pytest.mark.parametrize(
    "value", ["your_password_is_hunter", "Your-Pass-Word", "<hunter>", "<Hunter Two>", "<hunter2>"]
)
def test_a_placeholder_holds_only_the_names_words(value: str) -> None:
    assert_redacted_on_every_path(f"PASSWORD={value}", "PASSWORD=@")
    if not value.isidentifier():  # which the YAML rule keeps as code's (generation 5 too)
        assert_redacted_on_every_path(f"password: {value}", "password: @")
    assert sanitize_json({"password": value}) == {"password": REDACTED}
    assert redact_json({"password": value}) == {"password": REDACTED}
    assert json.loads(redact_json_text(json.dumps({"password": value}))) == {"password": REDACTED}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("API_KEY", "your_api_key"),
        ("GITHUB_TOKEN", "your-github-token-here"),
        ("PASSWORD", "your_password"),
        ("API_KEY", "<your-api-key>"),
        ("API_KEY", "<api key>"),
        ("PASSWORD", "<password>"),
        ("SECRET", "<Secret Name>"),
        ("PASSWORD", "<value>"),
        # A service's name before the name's own last word (huggingface_hub's docstrings).
        ("API_KEY", "<together_api_key>"),
        ("API_KEY", "your-replicate-api-key"),
    ],
)
def test_placeholders_are_kept_in_text_and_json(name: str, value: str) -> None:
    for text in (f"{name}={value}", f"{name.lower()}: {value}"):
        assert redact_secrets(text) == text
        assert redact_secrets_lines(text) == text
    assert sanitize_json({name: value}) == {name: value}
    assert redact_json({name: value}) == {name: value}
    assert json.loads(redact_json_text(json.dumps({name: value}))) == {name: value}


# A template's tag is no `<…>` value: redacted as generation 5 did, up to the blank.
def test_a_template_tag_is_no_bracketed_value() -> None:
    assert_redacted_on_every_path('PASSWORD=<%= ENV["X"] %>', 'PASSWORD=@ ENV["X"] %>')


# A paging cursor is no credential, whatever its shape; a dictionary word is none either.
QUERY_KEPT = [
    "https://x.com/a?nextPageToken=CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA0ZGo&x=1",
    "https://x.com/a?pageToken=CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA0ZGo",
    "https://x.com/a?next_token=abc123def456ghi789",
    "fetch(url + '?credentials=include')",
    "https://x.com/a?token=latest",
    "https://x.com/query?function=X&apikey=demo",
]


@pytest.mark.parametrize("text", QUERY_KEPT)
def test_page_tokens_and_dictionary_words_in_a_query_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text


# A list under a singular credential's name holds that credential.
def test_a_list_under_a_singular_credential_name_is_redacted() -> None:
    value = {"password": ["hunter2", "s3cret"], "user": ["bob"]}
    expected = {"password": [REDACTED, REDACTED], "user": ["bob"]}
    assert sanitize_json(value) == expected
    assert redact_json(value) == expected
    assert json.loads(redact_json_text(json.dumps(value))) == expected


# An INI header is a `[section]` of a name's characters: pytest-xdist's `[gw0]` and a status
# line's `[ OK ]` are no section.
@pytest.mark.parametrize(
    "text",
    ["[gw0]\npassword = getpass", "[ OK ]\ntoken = value", "[a/b]\npassword = getpass"],
)
def test_bracketed_status_lines_are_no_ini_section(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets_lines(text) == text
