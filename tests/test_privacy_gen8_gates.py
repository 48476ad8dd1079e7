r"""The list rules' hyperscan gates against Python's `re` (fixprivacy23): a gate must fire on
every long text where `re` finds its expression, or the rule never runs there. In the privacy
rules' database hyperscan 0.9.1 missed `pwd` names' lines that `re` matched with generation 8's
YAML branch (`…[^\n]*\][\t ]*(?:\r?\n|#|$)`): `  pwds: ['hunter2', 'zQ8pL2mN']` after 300
characters stayed in clear, as did 640 of 1,200 random lists under `pwds`, `PWDS`, `dbPwds` and
`Pwd`."""

from __future__ import annotations

import random
import re

import pytest

from app.capture.entities import SANITIZE_SCANNER
from app.privacy import REDACTED, redact_secrets
from app.privacy.engine import _SCANNED_GATES, _SCANNER
from app.privacy.lists import (
    _KEY_NAME_BEFORE,
    _PLURAL_STEMS,
    LIST_GATE_BRANCHES,
    LIST_NAME_GATES,
    LIST_RULES,
)
from app.textscan import SHORT_TEXT, LiteralScanner

# What the scan looks for: a `key` name's rule's narrower gate (privacy25) in its gate's place.
_LIST_GATES = [(f"gate:{pattern.pattern}", _SCANNED_GATES[pattern]) for _, pattern, _ in LIST_RULES]
_BRANCHES = [
    (
        f"gate:{pattern.pattern}",
        _KEY_NAME_BEFORE + branch if pattern in LIST_NAME_GATES else branch,
    )
    for _, pattern, _ in LIST_RULES
    for branch in LIST_GATE_BRANCHES[pattern]
]
# How many fuzzed texts must match each gate and each of its branches (privacy24): a gate or a
# branch that no case reaches is one the test cannot see missing.
_GATE_FLOOR = 50
_BRANCH_FLOOR = 10
_ELEMENTS = [
    "'hunter2'",
    '"zQ8pL2mN"',
    "hunter2",
    "x",
    "true",
    "'a b'",
    "p@ss!",
    "3",
    "None",
    "f(x)",
    "'",
    '""',
    "a.b",
    "[1]",
]
_SCALAR_CHARS = "abcxyzABQ0123456789_-.@!$%&*+=/"
_BLANKS = ["", " ", "  ", "\t", " \t", "\r"]


def _name(rng: random.Random, literal: str, ends: tuple[str, ...]) -> str:
    head = rng.choice(["", "db", "db_", "p", "P", "my", "  ", "  - ", "api_", "\t"])
    if literal.lower() == "key" and rng.random() < 0.8:
        # A credential word's letter before `key`, and what may stand between (privacy25).
        head += rng.choice(["api", "Secret", "PRIVATE", "auth", "signing", "API"])
        head += rng.choice(["", "_", "-", ".", "__", "\u00e9", "\u043a\u043b\u044e"])
    if literal[0].islower() and literal not in ("key", "pwd"):
        # The stems start after a credential word's first letter (`assw` of `password`).
        head += rng.choice(["p", "P", "s", "t", "T", "c", "a", "pa"] if literal != "ecret" else "s")
    return head + literal + rng.choice(ends) + rng.choice(["", "s", "S"])


def _random_scalar(rng: random.Random) -> str:
    quote = rng.choice(["", "'", '"'])
    body = "".join(rng.choices(_SCALAR_CHARS, k=rng.randint(1, 12)))
    return quote + body + quote


# A comment among a list's lines (privacy26), put in a fifth of the lines by a random stream of its
# own, so that the other cases stay those the floors below were set for.
_COMMENTS = [",  # c, 'x'\n  ", " # c\n", "  # c\n"]


def _list_line(
    rng: random.Random, literal: str, ends: tuple[str, ...], comments: random.Random
) -> str:
    quote = rng.choice(["", "", "'", '"'])
    elements = [
        rng.choice(_ELEMENTS) if rng.random() < 0.5 else _random_scalar(rng)
        for _ in range(rng.randint(0, 4))
    ]
    gaps = [rng.choice(["", " ", ", ", ",", ",\t", " , "]) for _ in elements]
    if gaps and comments.random() < 0.2:
        gaps[comments.randrange(len(gaps))] = comments.choice(_COMMENTS)
    items = "".join(gap + e for gap, e in zip(gaps, elements, strict=True))
    after = rng.choice(["\n", "\n", "\r\n", " \n", "\t# c\n", "", "],\n", " x\n", "]\n"])
    return (
        _name(rng, literal, ends)
        + quote
        + rng.choice(_BLANKS)
        # TOML's and INI's `name = [` (privacy24) besides JSON's and YAML's `:`.
        + rng.choice([":", "="])
        + rng.choice([*_BLANKS, "\n "])
        + "["
        + items
        + rng.choice(_BLANKS)
        + "]"
        + after
    )


def _cases(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    comments = random.Random(seed + 1)
    cases = []
    for _ in range(count):
        literal, ends = rng.choice(_PLURAL_STEMS)
        prefix = rng.choice(["x" * rng.randint(1, 400), "-" * 300 + "\n", "# " + "y" * 280 + "\n"])
        text = prefix + _list_line(rng, literal, ends, comments)
        if rng.random() < 0.5:
            text += rng.choice(["tail line\n", "z" * 30, "  - next: 1\n"])
        if len(text) < SHORT_TEXT:
            text = "." * (SHORT_TEXT - len(text)) + "\n" + text
        cases.append(text)
    return cases


# The privacy rules' own scanner, and capture's, which scans for its entities in the same pass.
@pytest.mark.parametrize("scanner", [_SCANNER, SANITIZE_SCANNER], ids=["privacy", "capture"])
def test_every_list_gate_fires_wherever_re_matches_its_expression(
    scanner: LiteralScanner,
) -> None:
    missed: list[tuple[str, str]] = []
    matched = dict.fromkeys([expression for _, expression in _LIST_GATES + _BRANCHES], 0)
    for text in _cases(23, 4000):
        found = scanner.present(text)
        for name, expression in _LIST_GATES + _BRANCHES:
            if re.search(expression, text) is not None:
                matched[expression] += 1
                if name not in found:
                    missed.append((expression[:40], text[-60:]))
    # The fuzz reaches every gate and every branch of one: a gate that no case matched could
    # not fail here.
    floors = {expression: _GATE_FLOOR for _, expression in _LIST_GATES}
    assert [
        expression
        for expression, count in matched.items()
        if count < floors.get(expression, _BRANCH_FLOOR)
    ] == []
    assert missed == []


@pytest.mark.parametrize(
    "line",
    [
        "  pwds: ['hunter2', 'zQ8pL2mN']\n",
        "  PWDS: ['hunter2', 'zQ8pL2mN']\n",
        "dbPwds: [\"hunter2\",'hunter2']\n",
        "Pwd:['hunter2',x,\ttrue]\n",
        "pwds: ['hunter2', 'zQ8pL2mN']\n",
    ],
)
def test_a_pwd_named_yaml_list_in_a_long_text_is_redacted(line: str) -> None:
    pad = "-" * 300 + "\n"
    assert redact_secrets(line) != line
    redacted = redact_secrets(pad + line)
    assert "hunter2" not in redacted
    assert REDACTED in redacted
    assert redacted == pad + redact_secrets(line)
