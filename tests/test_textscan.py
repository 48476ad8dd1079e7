"""LiteralScanner: the same answer as one `in` test per literal, on any text, from any thread."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.textscan import SHORT_TEXT, LiteralScanner, compile_all

TESTDATA = Path("/work/shared/testdata")
if not TESTDATA.exists():
    TESTDATA = Path(__file__).resolve().parents[2] / "shared" / "testdata"
REAL_TEXTS = [
    p.read_text(encoding="utf-8", errors="replace")
    for p in sorted(TESTDATA.rglob("*"))
    if p.is_file()
]
LITERALS = ("KEY", "oken", "://", "<", "sk-", "def", ".", "Traceback", "never-present-literal")


def expected(text: str) -> frozenset[str]:
    return frozenset(literal for literal in LITERALS if literal in text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "KEY",
        "x" * SHORT_TEXT + "KEY",
        "é" * SHORT_TEXT + "oken ünïcode :// sk-",
        "🙂" * 300 + "<def>",
        "ka" * 500,
        "\ud800 lone surrogate " * 40 + "KEY",
        "Traceb" + "ack" * 100,
    ],
)
def test_present_matches_substring_tests(text: str) -> None:
    assert LiteralScanner(LITERALS).present(text) == expected(text)


def test_present_on_real_agent_files() -> None:
    scanner = LiteralScanner(LITERALS)
    assert REAL_TEXTS
    for text in REAL_TEXTS:
        assert scanner.present(text) == expected(text)
        # A window cut anywhere, as entity extraction scans, answers the same way.
        assert scanner.present(text[1000:6000]) == expected(text[1000:6000])


@pytest.mark.parametrize(
    "text",
    # Short texts: the cased literals are skipped only when the text has no upper-case letter.
    ["sk-abc def", "oken KEY", "ǅ KEY", "123 :// 456", "Traceback", "ΣKEY", "ß ﬀ ǆ <def>"],
)
def test_short_texts_with_and_without_capitals_match_substring_tests(text: str) -> None:
    assert LiteralScanner(LITERALS).present(text) == expected(text)


def test_short_windows_of_real_files_match_substring_tests() -> None:
    scanner = LiteralScanner(LITERALS)
    for text in REAL_TEXTS:
        for start in range(0, min(len(text), 20_000), 97):
            window = text[start : start + 120]
            assert scanner.present(window) == expected(window)


def test_literal_at_the_very_end_and_start_is_found() -> None:
    text = "KEY" + "-" * 1000 + "Traceback"
    assert LiteralScanner(LITERALS).present(text) == {"KEY", "Traceback"}


def test_concurrent_threads_each_get_their_own_scratch() -> None:
    scanner = LiteralScanner(LITERALS)
    texts = [text for text in REAL_TEXTS if len(text) > SHORT_TEXT] * 4

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(scanner.present, texts))
    assert answers == [expected(text) for text in texts]


def test_refuses_non_ascii_and_empty_literals() -> None:
    with pytest.raises(ValueError, match="ASCII"):
        LiteralScanner(["clé"])
    with pytest.raises(ValueError, match="ASCII"):
        LiteralScanner([""])


def test_present_encoded_and_an_extended_scanner_answer_as_present() -> None:
    base = LiteralScanner(LITERALS[:4], gates={"gate:digits": r"[0-9]{3}"})
    wider = base.extended(LITERALS[4:], gates={"gate:x": "xyz"})
    for text in [*REAL_TEXTS, "KEY 123 xyz " * 40, "short KEY"]:
        utf8 = text.encode("utf-8", "surrogatepass")
        assert base.present_encoded(text, utf8) == base.present(text)
        assert wider.present_encoded(text, utf8) == wider.present(text)
        assert wider.present(text) & frozenset(base.names) == base.present(text)
        assert wider.present(text) - frozenset(base.names) >= expected(text) - set(LITERALS[:4])


def test_a_command_line_process_compiles_no_scanner_until_a_long_text_is_scanned() -> None:
    # Compiling the scanners built at import cost every `agmem` process ~50-130 ms of CPU.
    probe = (
        "import app.cli, app.capture.entities, app.privacy.engine, app.textscan as t\n"
        "print(sorted(s.compiled for s in t._SCANNERS))\n"
        "print(app.privacy.redact_secrets('x' * 300 + ' token=abcdefgh12345678') != '')\n"
        "print(app.privacy.engine._SCANNER.compiled)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )

    assert done.stdout.split("\n")[:3] == ["[False, False, False]", "True", "True"]


def test_compile_all_compiles_every_scanner_and_they_answer_the_same() -> None:
    scanner = LiteralScanner(LITERALS)
    assert not scanner.compiled

    compile_all()

    assert scanner.compiled
    text = "x" * SHORT_TEXT + "Traceback sk- KEY"
    assert scanner.present(text) == expected(text)


def test_a_short_text_asked_again_gets_the_same_answer_and_the_memory_stays_bounded() -> None:
    scanner = LiteralScanner(["oken", "KEY", "sk-"])
    for _ in range(2):
        assert scanner.present("Bash") == frozenset()
        assert scanner.present("a token") == {"oken"}
        assert scanner.present("API_KEY sk-x") == {"KEY", "sk-"}
    for number in range(10_000):
        assert scanner.present(f"token {number}") == {"oken"}
    assert len(scanner._cache) <= 4096
    long_short = "x" * 100 + " token"
    assert scanner.present(long_short) == {"oken"}
    assert long_short not in scanner._cache


def test_cached_answers_are_the_uncached_ones_over_varied_short_texts() -> None:
    # Texts that differ in one character, in case, in length and in order, each asked three
    # times (the first fills the cache), against one `in` test per literal and gate.
    scanner = LiteralScanner(LITERALS, {"gate": "x"})
    parts = ["KEY", "key", "oken", "Oken", "://", "<", "sk-", "s k-", "def", ".", "é", " ", "Tr"]
    texts = [a + b + c for a in parts for b in parts for c in ("", "x", "Traceback", "-" * 50)]
    texts += [text[:-1] for text in texts if text] + ["", "a" * 64, "a" * 65 + "KEY"]
    for _ in range(3):
        for text in texts:
            assert scanner.present(text) == expected(text) | {"gate"}, text


def test_cached_answers_share_one_set_per_answer() -> None:
    # Each cached text held a set of its own: 4095 texts of one answer cost ~5.7 MB.
    scanner = LiteralScanner(["oken", "KEY", "sk-"])
    first = scanner.present("a token 1")
    assert all(scanner.present(f"a token {n}") is first for n in range(2, 4000))
    assert scanner.present("KEY 1") is scanner.present("KEY 2")
    assert scanner.present("KEY 1") == {"KEY"}
