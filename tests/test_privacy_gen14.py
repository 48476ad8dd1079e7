"""Rules generation 14 (privacy27). Credentials generation 13 kept readable, whole or in part,
near the shapes it redacts: an escaped single quote in a `.env` value (`PASSWORD='ab\\'cd1234'`
showed `cd1234`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.privacy import redact_secrets, redact_secrets_lines
from tests.test_privacy import _assert_linear, assert_redacted_on_every_path

# `@` is each redaction.
ESCAPED_SINGLE_QUOTES = [
    ("PASSWORD='ab\\'cd1234'", "PASSWORD='@'"),
    ("export DB_PASS='p\\'w9'", "export DB_PASS='@'"),
    ("API_TOKEN='x\\'9Kq2mLp7Rt' # prod", "API_TOKEN='@' # prod"),
]


@pytest.mark.parametrize(("text", "expected"), ESCAPED_SINGLE_QUOTES)
def test_an_escaped_single_quote_does_not_end_a_dotenv_value(text: str, expected: str) -> None:
    assert_redacted_on_every_path(text, expected)


KEPT: list[str] = [
    # A placeholder in single quotes, as before.
    "PASSWORD='your_password'",
    "TOKEN='<your-token>'",
]


@pytest.mark.parametrize("text", KEPT)
def test_what_is_no_credential_is_kept(text: str) -> None:
    assert_redacted_on_every_path(text, text)


# Hostile inputs for each pattern this generation widened: a quarter megabyte costs at most
# about four times a sixteenth's work (`_assert_linear`), on the regex path of short texts'
# rules and on the long text's.
_QUARTER = 62_500
_LINEAR: list[Callable[[int], str]] = [
    lambda n: "PASSWORD='" + "\\'" * (_QUARTER // 2) * n,
    lambda n: "PASSWORD='a\\'" * (_QUARTER // 13) * n,
]


@pytest.mark.parametrize("make", _LINEAR)
def test_the_widened_patterns_cost_linear_work(make: Callable[[int], str]) -> None:
    for judge in (redact_secrets, redact_secrets_lines):
        _assert_linear(lambda n, judge=judge: judge(make(n)))
