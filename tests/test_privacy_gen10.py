"""Rules generation 10 (privacy24). A passphrase holding a password's label word of another
language (`parola`, Italian "word"; `heslo`, `sandi`) was kept as the label it is not; TOML and
INI lists under a credential's name (`passwords = ["hunter2", "x9!"]`) and a token's list under
`tokens` whose token is shorter than 16 characters stayed in clear."""

from __future__ import annotations

import pytest

from app.privacy import redact_json, redact_secrets, redact_secrets_lines, sanitize_json
from app.textscan import SHORT_TEXT
from tests.test_privacy import assert_redacted_on_every_path

# --- a label word in a passphrase -----------------------------------------------------------

# Passphrases holding one of the 34 label words among words no label of the catalogs holds:
# 5c0a06b redacted them, generation 9 kept them.
PASSPHRASES_WITH_A_LABEL_WORD = [
    'password: "casa parola verde sole"',
    'password: "zelena heslo kocka strom"',
    'passphrase: "pisang sandi merah pagi"',
    '"password": "gozd geslo reka sonce"',
    'api_key: "dom parool fiets boom"',
    'password = "orange senha mesa verde"',
]


@pytest.mark.parametrize("text", PASSPHRASES_WITH_A_LABEL_WORD)
def test_a_passphrase_holding_a_label_word_is_redacted(text: str) -> None:
    quote = '"' if '"' in text else "'"
    value = text.split(quote)[-2]
    assert_redacted_on_every_path(text, text.replace(value, "@"))


# Labels as the catalogs write them, lower-cased, and in English: kept (the tests of generations
# 8 and 9 keep theirs too).
LABELS = [
    'password: "nova senha aqui"',
    'password: "kata sandi baru"',
    'password: "masukkan kata sandi"',
    'password: "eski parola tekrar"',
    'password: "enter your password"',
    'password: "nieuw wachtwoord invoeren"',
    'password: "zadejte heslo znovu"',
]


@pytest.mark.parametrize("text", LABELS)
def test_a_label_is_still_kept(text: str) -> None:
    assert redact_secrets(text) == text
    padding = "-" * SHORT_TEXT + "\n"
    assert redact_secrets(padding + text) == padding + text
    assert redact_secrets_lines(text) == text


def test_a_text_list_judges_a_label_word_in_a_passphrase_alike() -> None:
    text = '"password": ["casa parola verde sole", "nova senha aqui"]'
    assert_redacted_on_every_path(text, '"password": ["@", "nova senha aqui"]')


# --- TOML and INI lists (`name = [...]`) ----------------------------------------------------

TOML_LISTS = [
    ('passwords = ["hunter2", "x9!"]\n', 'passwords = ["@", "@"]\n'),
    ("api_keys = ['sk-abc123def456', 'k2abc9']\n", "api_keys = ['@', '@']\n"),
    (
        '[db]\npasswords = ["hunter2", "x9!"]\nuser = \'app\'\n',
        '[db]\npasswords = ["@", "@"]\nuser = \'app\'\n',
    ),
    (
        'api_keys = [\n  "sk-abc123def456",\n  "k2abc9",\n]\n',
        'api_keys = [\n  "@",\n  "@",\n]\n',
    ),
    ('  secrets = ["s3cr3t!"]  # rotated\n', '  secrets = ["@"]  # rotated\n'),
    ('"passwords" = ["hunter2"]\n', '"passwords" = ["@"]\n'),
    ('PASSWORDS = ["hunter2", "letmein"]\n', 'PASSWORDS = ["@", "@"]\n'),
    ('tokens = ["ghp_abcdefgh12345678ijkl", "("]\n', 'tokens = ["@", "("]\n'),
    ("db_pwds = ['hunter2']", "db_pwds = ['@']"),
    # As `"credentials": [["app", "hunter2"]]`: a singular's name is kept.
    ('credentials = [["app", "hunter2"]]\n', 'credentials = [["app", "@"]]\n'),
]


@pytest.mark.parametrize(("text", "expected"), TOML_LISTS)
def test_toml_and_ini_lists_under_a_credentials_name_are_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


# Code's lists and comparisons under such names, and TOML's ordinary lists: kept.
KEPT_ASSIGNED_LISTS = [
    'tokens = ["(", ")", "NUMBER", "PLUS"]\n',
    "keys = ['name', 'email']\n",
    'x = passwords = ["hunter2"]\n',
    'if passwords == ["hunter2"]:\n',
    'passwords = ["hunter2"] + extra\n',
    "passwords = [p for p in pool]\n",
    "api_keys = [os.environ['A'], 'k2abc9x']\n",
    "max_tokens = [100, 200]\n",
    'stop_tokens = ["\\n\\n", "###"]\n',
    "tokens = [101, 2023, 102]\n",
    "passwords = [password, passphrase]\n",
    'secrets = ["your_api_key_here"]\n',
]


@pytest.mark.parametrize("text", KEPT_ASSIGNED_LISTS)
def test_code_and_ordinary_assigned_lists_are_kept(text: str) -> None:
    assert redact_secrets(text) == text
    padding = "-" * SHORT_TEXT + "\n"
    assert redact_secrets(padding + text) == padding + text


# --- tokens lists ------------------------------------------------------------------------------

# A token of 10 to 15 characters mixing capitals, small letters and digits, as random tokens are
# (`Xk9qLm2Pz7Rt`), under `tokens`: generation 9 kept any shorter than 16.
TOKEN_LISTS = [
    ('tokens: ["Xk9qLm2Pz7Rt"]\n', 'tokens: ["@"]\n'),
    ('"tokens": ["Xk9qLm2Pz7Rt", "hello"]', '"tokens": ["@", "hello"]'),
    ("tokens: [aZ3kPq9LmX2]\n", "tokens: [@]\n"),
    ('tokens = ["Qw7eRt5yUi3o"]\n', 'tokens = ["@"]\n'),
]


@pytest.mark.parametrize(("text", "expected"), TOKEN_LISTS)
def test_a_short_random_token_under_tokens_is_redacted(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


def test_json_redacts_a_short_random_token_under_tokens() -> None:
    value = {"tokens": ["Xk9qLm2Pz7Rt", "hello"]}
    assert sanitize_json(value) == {"tokens": ["[REDACTED]", "hello"]}
    assert redact_json(value) == {"tokens": ["[REDACTED]", "hello"]}


# What `tokens` lists hold in code and in a model's output (a lexer's names, a tokenizer's
# pieces, ids, special tokens, words): kept.
ORDINARY_TOKENS = [
    ["(", ")", "NUMBER", "PLUS", "LPAREN"],
    ["Hello", ",", "world", "!", "##ing", "\u2581the", "\u0120world"],
    ["<|endoftext|>", "[PAD]", "</s>", "internationalization"],
    ["x86_64", "gpt-4o", "utf-8", "2023", "ISO8601", "base64url"],
    ["BertForSequenceClassification", "XMLHttpRequest", "getElementById"],
    ["a1b2c3d4e5f6", "deadbeef1234"],
]


@pytest.mark.parametrize("tokens", ORDINARY_TOKENS)
def test_ordinary_tokens_lists_are_kept(tokens: list[str]) -> None:
    assert sanitize_json({"tokens": tokens}) == {"tokens": tokens}
    quoted = ", ".join(f'"{token}"' for token in tokens)
    for text in (f'"tokens": [{quoted}]', f"tokens: [{quoted}]\n", f"tokens = [{quoted}]\n"):
        assert redact_secrets(text) == text


def test_token_counts_in_a_transcript_are_kept() -> None:
    # A Claude Code transcript's usage, as ../shared/testdata holds it.
    usage = (
        '"usage":{"input_tokens":10,"cache_creation_input_tokens":13680,'
        '"cache_read_input_tokens":23545,"output_tokens":4},"max_tokens": [1024, 2048]'
    )
    assert redact_secrets(usage) == usage
