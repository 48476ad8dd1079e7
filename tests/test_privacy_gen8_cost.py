"""What the list rules cost on list-heavy code that holds no credential's list (privacy23): a
list rule runs only on a text that holds a list under a quoted name or on a YAML line of its
own, and its pattern fails without a call on a list of names. Speed is bench/privacy_lists.py's;
these pin the shapes that let the rules skip the work, and that the skipping changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.privacy import redact_secrets, redact_secrets_lines
from app.privacy.engine import _SCANNER, _rules_for
from app.privacy.lists import LIST_RULES, _plural_names
from bench.privacy_lists import TS_CHUNK
from tests.test_privacy import _assert_linear

_LIST_PATTERNS = {pattern for _, pattern, _ in LIST_RULES}


def _list_rules_run(text: str) -> int:
    return sum(pattern in _LIST_PATTERNS for pattern, _ in _rules_for(_SCANNER.present(text)))


# A list in a line of code under an unquoted name (React Query's `queryKey: [`, a JavaScript
# object's `tokens: [`) is neither JSON's nor YAML's: no list rule runs on a long text of them.
@pytest.mark.parametrize(
    "text",
    [
        TS_CHUNK,
        TS_CHUNK.replace("queryKey: [", "queryKeys: ["),
        "const opts = { passwords: ['a1', 'b2'] }\n" + "// filler line of a module\n" * 20,
        "x = dict(secrets: [1])  " + "y" * 300,
        # A YAML file of lists of names: no string, no digit, no symbol in any list.
        "keys: [a, b]\n" * 30,
        'db:\n  passwords: [str, None]\n  "tokens": [bos,\n  eos]\n' * 10,
    ],
)
def test_no_list_rule_runs_on_code_without_a_quoted_or_yaml_list(text: str) -> None:
    assert len(text) > 256
    assert _list_rules_run(text) == 0
    assert redact_secrets(text) == text


# Lists the rules read still select them, in a long text as in a short one.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("passwords: [hunter2, x]", "passwords: [[REDACTED], x]"),
        ("  - api_keys: [k1abc, 'k2abc']", "  - api_keys: [[REDACTED], '[REDACTED]']"),
        ("db:\n  passwords:\t[hunter2]", "db:\n  passwords:\t[[REDACTED]]"),
        ('log: {"passwords": ["hunter2"]}', 'log: {"passwords": ["[REDACTED]"]}'),
        ("got {'secret' :\n ['s3cr3t']}", "got {'secret' :\n ['[REDACTED]']}"),
        ("ключ_passwords: [hunter2]", "ключ_passwords: [[REDACTED]]"),
    ],
)
def test_quoted_and_yaml_lists_still_select_their_rule(text: str, expected: str) -> None:
    filler = "# " + "-" * 300 + "\n"
    assert _list_rules_run(filler + text) >= 1
    assert redact_secrets(filler + text) == filler + expected
    assert redact_secrets_lines(filler + text) == filler + expected
    assert redact_secrets(text) == expected


# A `key` name that no credential word ends (`keys`, `primary_keys`, `"keys"`) selects no list
# rule in a long text (privacy25): its list is a module's or a schema's, never redacted, and a
# file of `keys = ['name', 'email']` lines cost a call of Python each (~3 µs a line).
@pytest.mark.parametrize(
    "line",
    [
        "keys = ['name', 'email']\n",
        "    primary_keys = ['id']\n",
        'FOREIGN_KEYS = ["user_id"]\n',
        '  "keys": ["name", "email"],\n',
        "  monkeys: ['a1', 'b2']\n",
        "by_keys = ['a']\nall_key = ['b']\nreq_Keys = ['c']\n",
        "ключ_keys = ['name']\n",
    ],
)
def test_no_list_rule_runs_on_lists_under_a_key_name_of_no_credential(line: str) -> None:
    text = line * 30
    assert _list_rules_run(text) == 0
    assert redact_secrets(text) == text
    assert redact_secrets_lines(text) == text


# The names whose list the `key` rules redact still select them, whatever separates the
# credential word from its `key` (`_`, `.`, `-`, a letter of another script: `_KEY_WORD` reads
# ASCII letters and digits only).
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("api_keys = ['k1abc']\n", "api_keys = ['[REDACTED]']\n"),
        ('  "apiKeys": ["k1abc"],\n', '  "apiKeys": ["[REDACTED]"],\n'),
        ("SECRET_KEYS = ['k1abc']\n", "SECRET_KEYS = ['[REDACTED]']\n"),
        ("auth.keys: [k1abc]\n", "auth.keys: [[REDACTED]]\n"),
        ("private--keys = ['k1abc']\n", "private--keys = ['[REDACTED]']\n"),
        ("apié_keys = ['k1abc']\n", "apié_keys = ['[REDACTED]']\n"),
        ("signingклюKeys: ['k1abc']\n", "signingклюKeys: ['[REDACTED]']\n"),
        ("OPENAIAPIKEYS = ['k1abc']\n", "OPENAIAPIKEYS = ['[REDACTED]']\n"),
        ("APIkeys = ['k1abc']\n", "APIkeys = ['[REDACTED]']\n"),
    ],
)
def test_a_credential_key_names_list_still_selects_its_rule(line: str, expected: str) -> None:
    filler = "keys = ['name', 'email']\n" * 20
    assert _list_rules_run(filler + line) >= 1
    assert redact_secrets(filler + line) == filler + expected
    assert redact_secrets(line) == expected


# Where the rule runs anyway (a short text takes every gate as found; a long one holding a
# credential's list), such a name's list is let go before its name is read: the letter before
# its `key` tells (a call of the rule 0.6 µs instead of 2.3, timeit, unlocked).
def test_a_key_name_of_no_credential_is_let_go_before_its_name_is_read() -> None:
    lines = [
        "keys = ['name', 'email']",
        "  primary_keys: ['id', 1]",
        '{"keys": ["a"]}',
        "'Keys': ['x']",
    ]
    judged = _plural_names.cache_info()
    for line in lines:
        assert redact_secrets(line) == line
    after = _plural_names.cache_info()
    assert after.hits + after.misses == judged.hits + judged.misses
    assert redact_secrets("api_keys = ['k1abc']") == "api_keys = ['[REDACTED]']"
    assert _plural_names.cache_info().hits + _plural_names.cache_info().misses > (
        after.hits + after.misses
    )


# A list of names (`keys: [a, b]`) holds no string and no element with a digit or a symbol: the
# pattern fails on it, so that a file of them costs no call of Python per list.
@pytest.mark.parametrize(
    "text",
    [
        "keys: [a, b]",
        "passwords: [str]",
        "tokens: [bos, eos]",
        "secrets: [self.a, b_c]",
        "keys: []",
    ],
)
def test_a_list_of_names_fails_the_pattern(text: str) -> None:
    assert not any(pattern.search(text) for pattern in _LIST_PATTERNS)


@pytest.mark.parametrize(
    "text",
    [
        "passwords: [a, b1]",
        "api_keys: [a, 'b']",
        "passwords: [a,\n  b!]",
        "api_keys: [a, [b1]]",
        '"apiKeys": ["a"]',
        "passwords: [a, b, x-y]",
    ],
)
def test_a_list_with_a_string_or_a_symbol_matches_the_pattern(text: str) -> None:
    # Under a credential's `key` name: a bare `keys` fails the pattern itself since privacy26
    # (`_key_guard`).
    assert any(pattern.search(text) for pattern in _LIST_PATTERNS)


# The names before a list's first string or symbol are read once, possessively: a megabyte of
# names, closed or not, and many lists of them, cost linear work.
@pytest.mark.parametrize(
    "make",
    [
        lambda n: "passwords: [" + "abc, " * 50_000 * n + "x]",
        lambda n: "passwords: [" + "abc, " * 50_000 * n + "x1]",
        lambda n: "passwords: [" + "abc, " * 50_000 * n,
        lambda n: "keys: [a, b]\n" * 20_000 * n,
        lambda n: "passwords: [a, passwords: [b, " * 8_000 * n,
        lambda n: '"passwords": [' + "a, " * 80_000 * n + '"x"]',
    ],
)
def test_the_list_patterns_cost_linear_work(make: Callable[[int], str]) -> None:
    for judge in (redact_secrets, redact_secrets_lines):
        _assert_linear(lambda n, judge=judge: judge(make(n)))
