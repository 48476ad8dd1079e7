"""Credentials generation 6 kept in clear (privacy22): a quoted passphrase, a YAML flow list, a
list under a credential's singular written in text, a list nested in a credential's list. Each
is told from code by its shape; the code and prose beside each are kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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

REDACTED_NOW = [
    # A quoted passphrase: three or more lower-case words of three letters or more, single-spaced.
    ('password: "correct horse battery"', 'password: "@"'),
    ("password: 'correct horse battery staple'", "password: '@'"),
    ('"password": "correct horse battery staple"', '"password": "@"'),
    ('db_password = "troubador three horses"', 'db_password = "@"'),
    ('api_key: "blue sky turns"', 'api_key: "@"'),
    # A phrase holds no quote, `:` or `=`: an assignment inside a quoted value is still found.
    ("password: \"old password: 'hunter22'\"", "password: \"old password: '@'\""),
    # A YAML flow list under a credential's plural or singular name.
    ("passwords: [hunter2, x]", "passwords: [@, x]"),
    ("passwords: [hunter2, s3cr3t!]", "passwords: [@, @]"),
    ("  - api_keys: [k1abc, 'k2abc']", "  - api_keys: [@, '@']"),
    ('secrets: ["s3cr3t", p@ss!]  # the old ones', 'secrets: ["@", @]  # the old ones'),
    ("password: [hunter2]", "password: [@]"),
    ("db:\n  passwords: [hunter2, letmein]\n", "db:\n  passwords: [@, letmein]\n"),
    # A list under a credential's singular written in text (a log line quoting JSON).
    ('log: got {"password": ["hunter2"]} from x', 'log: got {"password": ["@"]} from x'),
    ("{'secret': ['s3cr3t', 'p@ss!']}", "{'secret': ['@', '@']}"),
    ('"api_key": ["correct horse battery"]', '"api_key": ["@"]'),
    # Beside the names a singular's or a plural's list keeps, a credential's shape is redacted.
    ('"password": ["min:8", "admin:s3cr3t", "p@ss!"]', '"password": ["min:8", "@", "@"]'),
    ("api_keys: [primary, k1abc, env:KEY]", "api_keys: [primary, @, env:KEY]"),
    # Secrets shaped like the names kept beside them (rev-mends22): a digit in a path or after
    # a colon, a query's password, a real value before a mask.
    (
        '"password": ["p4ss/w0rd", "pass:1234", "hunter2...", "ftp://x/y?pw=hunter2"]',
        '"password": ["@", "@", "@", "@"]',
    ),
    ("passwords: [s3cr3t/path, hunter:2, min:8]", "passwords: [@, @, min:8]"),
    # A list nested in a credential's list, in text.
    ('got {"passwords": [["hunter2", "s3cret!"]]}', 'got {"passwords": [["@", "@"]]}'),
    ('"apiKeys": ["k1abc", ["k2abc", 3]]', '"apiKeys": ["@", ["@", 3]]'),
]


@pytest.mark.parametrize(("text", "expected"), REDACTED_NOW)
def test_credentials_generation_6_kept_are_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


KEPT = [
    # Sentences, labels and messages under a credential's name: a capital, a sentence's end, a
    # small word of a sentence, the name's own word or a placeholder's.
    'password: "This field is required."',
    'password = "Enter your password"',
    'token: "not set"',
    'secret = "the secret"',
    'password: "Password (again)"',
    '"password": "a new password"',
    "password = 'old password'",
    'token = "%s %s"',
    'token = "{} {}"',
    'api_key: "your api key"',
    'password: "is required"',
    "password: 'no password'",
    'token: "bearer token"',
    'password: "hunter two."',
    'password: "two  spaces"',
    '"password": "min length 8"',
    'token = "ghp xxx"',
    'token: "lorem ipsum"',
    '"token": "foo bar"',
    'password: "one two three four five six seven"',
    # Flow lists that are code or a type's: identifiers, types, placeholders, a call, a line
    # that goes on after the list, a list under no credential's name.
    "passwords: [str]",
    "tokens: [bos, eos]",
    "tokens: [int, str]",
    "secrets: [SecretStr, Secret]",
    "passwords: [password, passphrase]",
    "passwords: [required]",
    "passwords: [hunter2, x], user: bob",
    "passwords = [p1, p2]",
    "keys: [k1abc, k2abc]",
    "passwords: []",
    "passwords: [self.a, self.b]",
    "passwords: [1, 2]",
    # Names of Secrets under `secrets` (Kubernetes, Compose), and Compose's secrets by name.
    "imagePullSecrets: [regcred]",
    "secrets: [db-password, api-key]",
    "secrets: [db_password, API_KEY]",
    "x = passwords: [hunter2]",
    "print(passwords: [hunter2])",
    # Lists in text under a singular name: messages and placeholders, as above.
    '{"password": ["This field is required."]}',
    '"password": ["Ensure this field has no more than 128 characters."]',
    '"token": ["a", "b"]',
    '"password": ["your_password"]',
    '"key": ["k1abc"]',
    # A singular's list in code names things (huggingface_hub's lazy imports).
    '"_git_credential": [\n    "list_credential_helpers",\n    "set_git_credential",\n]',
    '"token": ["self.token", "1.2"]',
    # A singular's list of plain words is a config's (a role's verbs, an API key's places).
    '"secret": ["get", "list", "watch"]',
    '"api_key": ["header", "query"]',
    '  - secret: ["create", "delete"]',
    "token: [read, write]",
    # Validation messages.
    '"password": ["too short", "too common"]',
    # Nested lists hold what the outer list holds: no credential's name, no credential.
    '"tokens": [["Hello", ","]]',
    '"keys": [["k1abc"]]',
    # Locale strings and descriptions under a credential's name (rev-privacy22): a passphrase
    # holds three words or more of three ASCII letters or more.
    'password: "mot de passe"',
    'current_password: "mot de passe actuel"',
    'new_password: "nueva contraseña"',
    '"password": "senha atual"',
    'token: "jeton invalide"',
    'secret: "clé secrète"',
    'password: "varchar(255) unique"',
    'password: "bcrypt hash"',
    'password: "sha256 salted"',
    'token: "read write"',
    'token: "eos bos"',
    'token: "unk pad"',
    'secret: "tls cert"',
    'secret: "tbd tbd"',
    'secret: "todo later"',
    # Two words stay in clear: a short phrase is a label's or a locale's as often.
    'password: "correct horse"',
    # Shorter than the hyperscan gate's quoted value (4): kept on every path alike.
    'password: "x y"',
    # A singular's list in text names options, rules, references, resources, URLs, addresses
    # and masks (rev-privacy22).
    'password: ["required", "min:8"]',
    '"password": ["-p", "--password"]',
    '"password": ["${PASSWORD}"]',
    '"secret": ["kube-system/my-secret"]',
    '"token": ["http://localhost:8080"]',
    '"password": ["user@example.com"]',
    '"api_key": ["sk-...", "sk-proj-..."]',
    '"password": ["8+ chars", "1 digit"]',
    # A plural's YAML flow list of names, references and scopes (rev-privacy22).
    "api_keys: [primary, secondary]",
    "api_keys: [openai, anthropic]",
    "api_keys: [header, query]",
    "api_keys: [env:OPENAI_API_KEY]",
    "- api_key: [read:pets, write:pets]",
    "passwords: [swordfish]",
]


@pytest.mark.parametrize("text", KEPT)
def test_code_and_prose_beside_them_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    assert redact_secrets("-" * SHORT_TEXT + "\n" + text) == "-" * SHORT_TEXT + "\n" + text
    assert redact_secrets_lines(text) == text


# In JSON, a list nested in a credential's list holds its credentials too, on every path.
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {"passwords": [["hunter2", "s3cret"], "x1"]},
            {"passwords": [[REDACTED, REDACTED], REDACTED]},
        ),
        ({"password": [["hunter2"]]}, {"password": [[REDACTED]]}),
        ({"apiKeys": [[["k1abc"]], {"name": "x"}]}, {"apiKeys": [[[REDACTED]], {"name": "x"}]}),
        ({"tokens": [["Hello", "a1B2c3D4e5F6g7H8i9"]]}, {"tokens": [["Hello", REDACTED]]}),
        ({"apiKeys": [["your_api_key", 3, None]]}, {"apiKeys": [["your_api_key", 3, None]]}),
        ({"list": [["hunter2"]]}, {"list": [["hunter2"]]}),
    ],
)
def test_json_lists_nested_under_credentials_are_redacted(
    value: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert sanitize_json(value) == expected
    assert redact_json(value) == expected
    assert json.loads(redact_json_text(json.dumps(value))) == expected


def test_json_nested_lists_keep_their_depth_limit() -> None:
    from app.privacy.engine import NestingTooDeep

    value: Any = "hunter2"
    for _ in range(70):
        value = [value]
    with pytest.raises(NestingTooDeep):
        sanitize_json({"passwords": value})


# Each case is a megabyte at most; one of many matches a line is a quarter of one (their cost is
# per match, as every rule's: ~1.5 s a megabyte of `DB_PASSWORD=hunter2` lines).
@pytest.mark.parametrize(
    "make",
    [
        lambda n: 'password: "' + "ab " * 83_000 * n + 'c"',
        lambda n: 'password: "correct horse"\n' * 2_250 * n,
        lambda n: "passwords: [" + "hunter2, " * 7_000 * n + "x]",
        lambda n: "passwords: [" + "hunter2, " * 28_000 * n,
        lambda n: "passwords: [hunter2]\n" * 3_000 * n,
        lambda n: "password: [" * 25_000 * n,
        lambda n: '"password": [' + '["k1", ' * 40_000 * n,
        lambda n: '"passwords": [' + '["k1", "k2"], ' * 5_000 * n + "]",
        lambda n: '"password": [' + '"k1", ' * 10_000 * n + '"k2"]',
        # Many lists on one line: each looks for its line's start and end a bounded way.
        lambda n: "passwords: [a1] #" * 3_750 * n,
        lambda n: " " * 250_000 * n + "passwords: [a1]",
        lambda n: "x passwords: [a1] " * 3_500 * n,
        lambda n: "  - passwords: [" + "[a, " * 60_000 * n,
        lambda n: '"password": ["' + "x" * 250_000 * n,
    ],
)
def test_the_privacy22_rules_cost_linear_work_on_a_megabyte(make: Callable[[int], str]) -> None:
    for judge in (redact_secrets, redact_secrets_lines):
        _assert_linear(lambda n, judge=judge: judge(make(n)))
