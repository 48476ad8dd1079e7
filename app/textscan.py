"""Which of a fixed set of literals occur in a text, in one pass.

Redaction and entity extraction run a regex only when one of its literals occurs in the text
(`app/privacy/`, `app/capture/entities.py`). Testing each literal with `in` costs one C scan
of the whole text per literal: 37 literals over a 10 KB string took ~280 µs in the capture
profile, the largest CPU cost of a capture request, because CPython's substring search runs at
only ~1.5 characters per ns on the non-ASCII strings most payloads are. Hyperscan finds all of
them in one SIMD pass over the UTF-8 bytes (~25 µs for the same string, encoding included).
Short texts keep the `in` tests, which beat hyperscan's fixed cost per call there.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping

import hyperscan

# Below this many characters the `in` tests are as fast as a hyperscan call (measured on the
# capture payloads: both ~2 µs for the redaction literals at ~250 characters).
SHORT_TEXT = 256


# Short texts whose found literals a scanner remembers (`LiteralScanner._short`): up to this
# many characters, this many texts, and a dict's `clear` when full. The texts hold one set per
# distinct answer (`_answers`): a set each, 4095 texts of the privacy scanner took 5.4 MB (the
# privacy scanner's gates are in every answer); shared, 0.37 MB (tracemalloc).
_CACHED_TEXT = 64
_SHORT_CACHE_MAX = 4096


def _escaped(literal: str) -> str:
    """A literal as a hyperscan (PCRE) expression: every non-alphanumeric byte escaped."""
    return "".join(ch if ch.isalnum() else f"\\x{ord(ch):02x}" for ch in literal)


class LiteralScanner:
    """Finds which of `literals` (case-sensitive, ASCII) occur in a text.

    `gates` adds named hyperscan expressions matched against the UTF-8 bytes: a name is in the
    answer when its expression matches, and always for short texts (which skip hyperscan). An
    expression must match wherever the rule it gates could match (a superset), so that gating
    never changes a result.
    """

    def __init__(self, literals: Iterable[str], gates: Mapping[str, str] | None = None) -> None:
        self.literals: tuple[str, ...] = tuple(dict.fromkeys(literals))
        if not all(literal and literal.isascii() for literal in self.literals):
            # Matching the UTF-8 bytes is the same as matching the characters only for ASCII.
            raise ValueError("literals must be non-empty ASCII strings")
        self.gates: dict[str, str] = dict(gates or {})
        self.names: tuple[str, ...] = (*self.literals, *self.gates)
        self._always = frozenset(self.gates)
        # A text with no upper-case letter (str.islower: most short keys, paths and commands)
        # cannot hold a literal that has one; half of the privacy rules' literals do, and each
        # `in` test costs ~40 ns even on a short text.
        self._caseless = tuple(lit for lit in self.literals if lit == lit.lower())
        self._cased = tuple(lit for lit in self.literals if lit != lit.lower())
        self._expressions = [_escaped(lit) for lit in self.literals] + list(self.gates.values())
        # Compiled by the first long text (`compile`), not here: the three scanners built at
        # import cost ~130 ms of CPU to compile, which every `agmem` command paid (the privacy
        # rules' ~50 ms come with the command line's imports), though most scan no long text.
        # `agmem serve` compiles them before it answers (`compile_all`), so no request waits.
        self._cache: dict[str, frozenset[str]] = {}
        self._answers: dict[frozenset[str], frozenset[str]] = {}
        self._database: hyperscan.Database | None = None
        self._compiling = threading.Lock()
        # Scratch space may serve one scan at a time: one per thread (sync and the worker call
        # the privacy functions from worker threads too).
        self._local = threading.local()
        _SCANNERS.add(self)

    @property
    def compiled(self) -> bool:
        return self._database is not None

    def compile(self) -> hyperscan.Database:
        """The hyperscan database of this scanner's expressions, compiled once."""
        database = self._database
        if database is not None:
            return database
        with self._compiling:
            if self._database is None:
                database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                database.compile(
                    expressions=[expression.encode() for expression in self._expressions],
                    ids=list(range(len(self._expressions))),
                    elements=len(self._expressions),
                    # Each is reported once, at its first occurrence: presence is all we need.
                    flags=[hyperscan.HS_FLAG_SINGLEMATCH] * len(self._expressions),
                )
                self._database = database
            return self._database

    def extended(
        self, literals: Iterable[str], gates: Mapping[str, str] | None = None
    ) -> LiteralScanner:
        """A scanner that finds this one's literals and gates and these too, in the same pass."""
        return LiteralScanner((*self.literals, *literals), {**self.gates, **(gates or {})})

    def present(self, text: str) -> frozenset[str]:
        """The literals (and gate names) that occur in `text`."""
        if len(text) < SHORT_TEXT:
            return self._short(text)
        # "surrogatepass": a lone surrogate cannot be part of an ASCII literal, and must not fail.
        return self._scan(text.encode("utf-8", "surrogatepass"))

    def present_encoded(self, text: str, utf8: bytes) -> frozenset[str]:
        """`present` for a caller that has `text`'s UTF-8 already: encoding a 1-20 KB non-ASCII
        text again cost about as much as the scan itself (~6 µs)."""
        if len(text) < SHORT_TEXT:
            return self._short(text)
        return self._scan(utf8)

    def _short(self, text: str) -> frozenset[str]:
        # A tool's name and its small values come again with every call ("Bash", "Read", a
        # file's path): testing the ~110 privacy literals on one cost ~1.5-3 µs, a look-up here
        # ~0.1 µs. Only texts of a few words are kept, and no more than _SHORT_CACHE_MAX.
        if len(text) <= _CACHED_TEXT:
            cached = self._cache.get(text)
            if cached is None:
                found = self._test(text)
                if len(self._cache) >= _SHORT_CACHE_MAX:
                    self._cache.clear()
                    self._answers.clear()
                # Another thread's `clear` between these lines costs a set shared no more.
                cached = self._answers.setdefault(found, found)
                self._cache[text] = cached
            return cached
        return self._test(text)

    def _test(self, text: str) -> frozenset[str]:
        found = [literal for literal in self._caseless if literal in text]
        if not text.islower():
            found += [literal for literal in self._cased if literal in text]
        return self._always.union(found)

    def _scan(self, data: bytes) -> frozenset[str]:
        database = self.compile()
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(database)
        found: list[str] = []
        names = self.names

        def on_match(index: int, _start: int, _end: int, _flags: int, _context: object) -> None:
            found.append(names[index])

        database.scan(data, match_event_handler=on_match, scratch=scratch)
        return frozenset(found)


_SCANNERS: weakref.WeakSet[LiteralScanner] = weakref.WeakSet()


def compile_all() -> None:
    """Compile every scanner built so far: a server's start, not its first request, pays it."""
    for scanner in list(_SCANNERS):
        scanner.compile()
