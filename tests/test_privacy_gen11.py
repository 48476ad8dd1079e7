"""Rules generation 11 (fixprivacy24). Generation 10 redacted any 10 to 15 characters mixing
capitals, small letters and digits in a `tokens` list, and so a JavaScript tokenizer's
identifiers (`new Uint8Array(16)`, `OAuth2Client`) that generation 9 kept: an identifier is told
from a random token by its words (rev-privacy24)."""

from __future__ import annotations

import pytest

from app.privacy import redact_json, redact_secrets, redact_secrets_lines, sanitize_json
from app.textscan import SHORT_TEXT
from tests.test_privacy import assert_redacted_on_every_path

# The reviewer's identifiers: words of three letters or more between a number or two.
IDENTIFIERS = [
    "Uint8Array",
    "Float64Array",
    "Int32Array",
    "OAuth2Client",
    "toBase64String",
    "Python3Lexer",
    "ES2015Module",
    "sha256Digest",
    "BERTbase12",
]


@pytest.mark.parametrize("identifier", IDENTIFIERS)
def test_an_identifier_in_a_tokens_list_is_kept(identifier: str) -> None:
    tokens = ["new", identifier, "(", "16", ")"]
    assert sanitize_json({"tokens": tokens}) == {"tokens": tokens}
    assert redact_json({"tokens": tokens}) == {"tokens": tokens}
    quoted = ", ".join(f'"{token}"' for token in tokens)
    padding = "-" * SHORT_TEXT + "\n"
    for text in (f'"tokens": [{quoted}]', f"tokens: [{quoted}]\n", f"tokens = [{quoted}]\n"):
        assert redact_secrets(text) == text
        assert redact_secrets(padding + text) == padding + text
        assert redact_secrets_lines(text) == text


# Random tokens with few numbers still break into runs of one or two letters.
RANDOM_TOKENS = ["kR7mQpXzWv", "Tq9wErTyUiOp", "aB3cD4eFgHiJ", "zXcVbN8mQwE"]


@pytest.mark.parametrize("token", RANDOM_TOKENS)
def test_a_random_token_with_few_digits_is_still_redacted(token: str) -> None:
    assert sanitize_json({"tokens": [token, "("]}) == {"tokens": ["[REDACTED]", "("]}
    assert_redacted_on_every_path(f'tokens = ["{token}", "("]\n', 'tokens = ["@", "("]\n')
    assert_redacted_on_every_path(f'"tokens": ["{token}"]', '"tokens": ["@"]')


def test_one_cache_judges_a_list_name_in_json_and_in_text() -> None:
    # JSON's keys and text's list names were judged through two caches of the same function
    # (rev-privacy24): a name JSON judged is not judged again for text.
    from app.privacy.lists import _plural_names

    _plural_names.cache_clear()
    assert sanitize_json({"deploy_api_keys": ["hunter2x9"]}) == {"deploy_api_keys": ["[REDACTED]"]}
    misses = _plural_names.cache_info().misses
    assert misses >= 1
    text = 'deploy_api_keys = ["hunter2x9"]\n'
    assert redact_secrets(text) == 'deploy_api_keys = ["[REDACTED]"]\n'
    assert _plural_names.cache_info().misses == misses
