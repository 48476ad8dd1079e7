"""Derived fields: observation type table, token estimate, payload caps, entities."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from app import exactjson
from app.capture.derive import (
    dumps,
    dumps_bytes,
    normalize_tool_name,
    observation_type,
    prepare_payload,
)
from app.capture.entities import (
    _EXTENSION_SET,
    _GATE_NAMES,
    _GATES,
    _PATH_CHARS,
    _SCANNER,
    MAX_PER_KIND,
    SANITIZE_SCANNER,
    SCAN_HEAD,
    entity_text,
    extract_entities,
    merge_entities,
)
from app.privacy import sanitize_json
from app.textscan import SHORT_TEXT


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("read_file", {}, "file_read"),
        ("read_many_files", {}, "file_read"),
        ("write_file", {}, "file_write"),
        ("edit", {}, "file_write"),
        ("replace", {}, "file_write"),
        ("run_shell_command", {}, "code_execution"),
        ("run_tests", {}, "code_execution"),
        ("bash", {}, "code_execution"),
        ("Bash", {}, "code_execution"),
        ("grep", {}, "search"),
        ("glob", {}, "search"),
        ("search", {}, "search"),
        ("web_fetch", {}, "web"),
        ("google_search", {}, "web"),
        ("WebFetch", {}, "web"),
        ("mcp__filesystem__readFile", {}, "file_read"),
        ("default_api.write_file", {}, "file_write"),
        ("str_replace_based_edit_tool", {"command": "view"}, "file_read"),
        ("str_replace_based_edit_tool", {"command": "create"}, "file_write"),
        # A to-do list is the agent's plan, no file: a `write` in its name made it a file
        # write, counted as one in summaries.
        ("TodoWrite", {}, "other"),
        ("write_todos", {}, "other"),
        ("todo_read", {}, "other"),
        # Cline's and OpenHands' shell and browser tools were `other`.
        ("execute_bash", {}, "code_execution"),
        ("execute_ipython_cell", {}, "code_execution"),
        ("browser_action", {}, "web"),
        ("save_memory", {}, "other"),
        ("think", {}, "other"),
        ("custom_search_tool", {}, "search"),
    ],
)
def test_observation_type(name: str, args: Any, expected: str) -> None:
    assert observation_type(name, args) == expected


def test_normalize_tool_name() -> None:
    assert normalize_tool_name("mcp__server__readFile") == "read_file"
    assert normalize_tool_name("default_api.run-shell-command") == "run_shell_command"


def test_original_tokens_are_four_chars_a_token_rounded_up_and_a_wide_character_one() -> None:
    def tokens(value: object) -> int:
        return prepare_payload(value, max_chars=100, max_depth=8).original_tokens

    assert [tokens("x" * n) for n in (0, 1, 4, 5, 400)] == [0, 1, 1, 2, 100]
    assert tokens("專案 ok") == 2 + 1  # two ideographs, then " ok"
    assert tokens({"k": "專案"}) == 2 + 2  # {"k":""} is 8 characters
    assert tokens("專" * 400) == 400  # measured before the cap, as the characters are


def test_prepare_payload_small_value_untouched() -> None:
    payload = prepare_payload({"a": "é"}, max_chars=1000, max_depth=10)
    assert payload.value == {"a": "é"}
    assert payload.json_text == '{"a":"é"}'
    assert payload.original_chars == 9
    assert payload.original_bytes == 10
    assert payload.truncated is False


def test_entities_from_code_and_output() -> None:
    text = (
        "def validate_token(raw):\n"
        "    raise TokenExpiredError('x')\n"
        "class CartService:\n"
        "export function renderCart() {}\n"
        "const total = (items) => items.length\n"
        "Traceback (most recent call last):\n"
        '  File "app/auth/jwt.py", line 3\n'
        "see https://docs.python.org/3/library/re.html.\n"
        "import requests\nfrom fastapi import FastAPI\n"
        "import { z } from 'zod'\nconst x = require(\"@scope/pkg/sub\")\n"
        "$ pip install httpx 'pydantic>=2' --upgrade\n"
        "npm ERR! code ENOENT\n"
    )
    found = extract_entities({"command": "pytest -q tests/", "file_path": "src/app.ts"}, text)
    assert found["files"][:2] == ["src/app.ts", "app/auth/jwt.py"]
    assert found["commands"] == ["pytest -q tests/"]
    assert set(found["functions"]) == {"validate_token", "renderCart", "total"}
    assert found["classes"] == ["CartService"]
    assert set(found["errors"]) == {"TokenExpiredError", "Traceback", "ENOENT"}
    assert found["urls"] == ["https://docs.python.org/3/library/re.html"]
    assert (
        {"requests", "fastapi", "zod", "@scope/pkg", "httpx", "'pydantic>=2'"}
        >= set(found["packages"])
        >= {"requests", "fastapi", "zod", "@scope/pkg", "httpx"}
    )


def test_entities_are_bounded_and_merge() -> None:
    text = " ".join(f"file{index}.py" for index in range(100))
    found = extract_entities(text)
    assert len(found["files"]) == MAX_PER_KIND
    merged = merge_entities({"files": ["a.py"]}, {"files": ["a.py", "b.py"], "urls": ["u"]})
    assert merged == {"files": ["a.py", "b.py"], "urls": ["u"]}
    assert entity_text(merged) == "files: a.py, b.py\nurls: u"


def test_entities_of_plain_prose_are_empty() -> None:
    assert extract_entities("The cart total is wrong when the user adds two items.") == {}


GATE_SAMPLES = [
    "see app/main.py and https://x.dev/a; def run(x): pass; function go() {}; func (s *S) Do()",
    "fn main() {} const f = async (a) => a; class Foo: interface Bar struct Baz trait Q enum E",
    "ValueError: bad; IOException; Traceback (most recent call last); Segmentation fault",
    "thread panicked at x; sh: foo: command not found; Permission denied",
    "error TS2304, error CS0103",
    "pip install requests; uv add httpx; go get example.com/m; npm i left-pad",
    "import os\nfrom app import x\nconst a = require('lodash'); import b from 'react'",
]


def test_every_entity_match_has_its_gate_literal() -> None:
    """A pattern runs only when one of its gate literals occurs: no match may lack one."""
    real = [p for p in Path("/work/shared/testdata").rglob("*") if p.is_file()]
    texts = GATE_SAMPLES + [p.read_text(encoding="utf-8", errors="replace") for p in real]
    matched = set()
    for pattern, literals in _GATES.items():
        for text in texts:
            if pattern.search(text):
                matched.add(pattern)
                assert any(literal in text for literal in literals), pattern.pattern
    assert matched == set(_GATES)


FILE_SAMPLES = [
    "a.py b.Py c.py_x d.pyé e.py/ f.py3 g.ps1 h.tar.gz i.tsx. ~/x/y-z@1.2/k.json, .env",
    "C:\\dir\\n.py \\napp/x.md (see ./docs/a.md) é/ü/ß.rs 1.5 e.g. foo.bar.toml",
    # Paths longer than the walk-back's chunk (64), one of them from the text's first character.
    "/very/" + "deep/" * 30 + "module.py and " + "x" * 63 + ".py and " + "y" * 64 + ".md",
    "z" * 65 + "/" + "w" * 128 + ".ts then \\n" + "v" * 64 + ".go",
]


def _files_rule_by_rule(text: str) -> list[str]:
    """The file rule as first written: any word after a dot, a set lookup, a char-by-char walk."""
    path_chars = frozenset(_PATH_CHARS)
    files: list[str] = []
    for match in re.finditer(r"\.(\w+)(?![\w/])", text):
        if match.group(1) not in _EXTENSION_SET:
            continue
        start = match.start()
        while start > 0 and text[start - 1] in path_chars:
            start -= 1
        if text[start - 1 : start] == "\\" and text[start : start + 1] in ("n", "t", "r"):
            start += 1
        if start < match.start():
            files.append(text[start : match.end()].lstrip("."))
    return files


def test_file_rule_matches_its_first_form_on_real_text() -> None:
    """The narrowed extension regex and the rstrip walk find exactly what the first form found."""
    real = [p for p in Path("/work/shared/testdata").rglob("*") if p.is_file()]
    texts = FILE_SAMPLES + [p.read_text(encoding="utf-8", errors="replace") for p in real]
    for text in texts:
        window = text[:SCAN_HEAD]
        expected = list(dict.fromkeys(f.strip()[:300] for f in _files_rule_by_rule(window)))
        expected = [f for f in expected if f][:MAX_PER_KIND]
        assert extract_entities({"x": window}).get("files", []) == expected


def test_regex_gates_fire_wherever_their_pattern_matches() -> None:
    """A pattern with a hyperscan gate that matches a text always has its gate in the scan."""
    padding = "-" * SHORT_TEXT  # long enough to take the hyperscan path
    tricky = [
        "def\u00a0run(x)",
        "class\u3000Foo:",
        "struct\n\tBar {",
        "from\u2028'react'",
        "from  os.path\timport join",
        "fn\x1cmain()",
        "func (s *S) Do()",
        "open failed: ENOENT, then EACCES",
    ]
    real = [p for p in Path("/work/shared/testdata").rglob("*") if p.is_file()]
    texts = [padding + s for s in tricky + GATE_SAMPLES]
    texts += [p.read_text(encoding="utf-8", errors="replace") for p in real]
    fired = set()
    for text in texts:
        found = _SCANNER.present(text)
        for pattern, name in _GATE_NAMES.items():
            if pattern.search(text):
                fired.add(pattern)
                assert name in found, pattern.pattern
    assert fired == set(_GATE_NAMES)
    assert extract_entities(padding + "def\u00a0run(x)\nclass\u3000Foo:") == {
        "functions": ["run"],
        "classes": ["Foo"],
    }


def test_entities_from_the_sanitizing_scan_equal_a_scan_of_their_own() -> None:
    """The names found while sanitizing the whole text gate the window's patterns: the entities
    are those of the window's own scan, on real files, secrets, private spans and a cap."""
    real = [p for p in Path("/work/shared/testdata").rglob("*") if p.is_file()]
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in real] + GATE_SAMPLES
    texts += [
        # Literals only past the window (a superset gates the window: nothing more is found).
        "x " * SCAN_HEAD + "def run(): import os\nclass Foo: https://e.com/a.py " + "y " * 600,
        "token = 'abcd1234efgh' " * 20 + "see app/main.py",  # redacted: scanned again
        "a <private>sk-secret</private> b.py " * 20,  # stripped: scanned again
        "\x00é\ud800 app/x.py " * 40,  # cleaned
        "def huge(): pass\n" * 5000,  # capped below
    ]
    fast_paths = 0
    for text in texts:
        for value in (text, {"file_path": "src/a.py", "content": text, "n": [text[:500], 3]}):
            payload = prepare_payload(
                value, max_chars=65_536, max_depth=64, scanner=SANITIZE_SCANNER
            )
            plain = prepare_payload(value, max_chars=65_536, max_depth=64)
            assert payload == plain  # the scanner changes nothing stored
            fast_paths += len(payload.scanned)
            assert extract_entities(payload.value, scanned=payload.scanned) == extract_entities(
                payload.value
            )
    assert fast_paths > len(texts)


def test_sanitize_scan_names_are_those_of_the_stored_text() -> None:
    value = {"a": "plain text with a.py " * 30, "b": "api_key = 'hunter2hunter2' " * 30}
    payload = prepare_payload(value, max_chars=65_536, max_depth=64, scanner=SANITIZE_SCANNER)
    kept = {text for text, _found in payload.scanned.values()}
    assert kept == {payload.value["a"]}  # "b" was redacted: its scan is of the text before
    for text, found in payload.scanned.values():
        assert found == SANITIZE_SCANNER.present(text)


def test_original_size_of_a_structure_counts_its_json_characters() -> None:
    """Counted from the strings' UTF-8 without decoding the JSON: the same as decoding it."""
    real = [p for p in Path("/work/shared/testdata").rglob("*") if p.is_file()]
    texts = [p.read_text(encoding="utf-8", errors="replace")[:30_000] for p in real]
    values: list[Any] = [
        {"clé 🙂": ["é", {"ü": "ß" * 10, "n": [1, 2.5, None, True]}], "a": 'x\n"y"\t'},
        [{"k": "\u2028 \x01 \ud800"}, 2**70, "日本語"],  # a 70-bit integer: the json fallback
        *({"content": text, "path": "α/β.py"} for text in texts),
        {"big": "é" * 70_000},  # truncated: its size is still that of the whole
    ]
    for value in values:
        payload = prepare_payload(value, max_chars=65_536, max_depth=64)
        whole = dumps(sanitize_json(value))
        assert payload.original_chars == len(whole)
        assert payload.original_bytes == len(whole.encode("utf-8"))


def test_numbers_read_exactly_are_written_as_exactjson_writes_them() -> None:
    # orjson writes them as their text (`orjson.Fragment`); what it refuses still goes to
    # `exactjson.dumps`: an integer past 64 bits, a NaN read exactly (refused before a write).
    values = [
        exactjson.loads('{"a": [1e-400, 1.50, -0.0, 2.5E+7, 0.1], "é": "ü\\n\\u0001\\"", "n": 7}'),
        exactjson.loads("[1.50, " + "9" * 40 + "]"),
        [Decimal("NaN"), Decimal("-Infinity"), Decimal("1.5")],
        Decimal("1E-400"),
    ]
    for value in values:
        expected = exactjson.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        assert dumps_bytes(value) == expected, value
    assert dumps_bytes([Decimal("1E-400"), Decimal("1.50")]) == b"[1E-400,1.50]"
