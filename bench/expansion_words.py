"""Query expansion words for `bench.relevance_variants`: embedding neighbours (wordllama's token
table or the corpus's own words), pseudo-relevance feedback and corpus co-occurrence."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from app.llm.embeddings import Embedder, LocalEmbedder
from app.search.queries import ENGLISH_STOP_WORDS, content_terms, keyword_terms
from app.search.term_stats import lexeme
from bench.corpus.build import CorpusChunk

_WORD = re.compile(r"[a-z]{3,}")


def query_words(query: str) -> list[str]:
    """The query's alphabetic content words, as the keyword branch splits them."""
    return [t for t in content_terms(keyword_terms(query)) if t.isalpha()]


@dataclass(slots=True)
class Vocabulary:
    """Words with unit wordllama vectors, to find a query word's nearest neighbours."""

    words: list[str]
    vectors: NDArray[np.float32]

    def neighbours(
        self, embedder: Embedder, terms: list[str], per_word: int, floor: float
    ) -> list[str]:
        stems = {lexeme(term) for term in terms}
        chosen: dict[str, None] = {}
        for term in terms:
            similarity = self.vectors @ embedder.embed_query(term)
            taken = 0
            for index in np.argsort(-similarity)[:50]:
                word = self.words[index]
                if similarity[index] < floor or taken >= per_word:
                    break
                if lexeme(word) in stems or word in chosen or word in ENGLISH_STOP_WORDS:
                    continue
                chosen[word] = None
                taken += 1
        return list(chosen)


def token_vocabulary(embedder: LocalEmbedder) -> Vocabulary:
    """wordllama's whole-word tokens (a leading word mark, four letters or more)."""
    model = embedder._model  # noqa: SLF001 - the bench reads the model's own token table
    table = np.asarray(model.embedding, dtype=np.float32)
    pairs = [
        (index, token[1:])
        for token, index in model.tokenizer.get_vocab().items()
        if token.startswith("\u2581")
        and re.fullmatch(r"[a-z]{4,}", token[1:])
        and index < table.shape[0]
        and token[1:] not in ENGLISH_STOP_WORDS
    ]
    rows = table[[index for index, _ in pairs]]
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return Vocabulary([word for _, word in pairs], rows)


def corpus_vocabulary(embedder: Embedder, chunks: list[CorpusChunk]) -> Vocabulary:
    """One surface form per lexeme of the corpus's words, embedded alone."""
    forms: dict[str, str] = {}
    for chunk in chunks:
        for word in _WORD.findall(chunk.content.lower()):
            if word not in ENGLISH_STOP_WORDS:
                forms.setdefault(lexeme(word), word)
    words = sorted(forms.values())
    return Vocabulary(words, embedder.embed_documents(words))


def document_frequency(chunks: list[CorpusChunk]) -> Counter[str]:
    df: Counter[str] = Counter()
    for chunk in chunks:
        df.update({lexeme(w) for w in _WORD.findall(chunk.content.lower())})
    return df


def word_bags(chunks: list[CorpusChunk]) -> list[dict[str, str]]:
    """Each chunk's content words as lexeme -> first surface form."""
    bags = []
    for chunk in chunks:
        bag: dict[str, str] = {}
        for word in _WORD.findall(chunk.content.lower()):
            if word not in ENGLISH_STOP_WORDS:
                bag.setdefault(lexeme(word), word)
        bags.append(bag)
    return bags


def cooccurring_words(
    query: str, bags: list[dict[str, str]], df: Counter[str], per_word: int
) -> list[str]:
    """Corpus co-occurrence: for each query word the index holds, the words sharing the most
    chunks with it by Dice coefficient (held by two chunks or more), the query's own excluded."""
    stems = {lexeme(t) for t in query_words(query)}
    forms: dict[str, str] = {}
    chosen: dict[str, None] = {}
    for stem in sorted(stems):
        if df[stem] == 0:
            continue
        together: Counter[str] = Counter()
        for bag in bags:
            if stem in bag:
                together.update(bag.keys())
                forms.update({s: w for s, w in bag.items() if s not in forms})
        dice = {
            other: 2 * n / (df[stem] + df[other])
            for other, n in together.items()
            if other not in stems and df[other] > 1
        }
        for other, _ in sorted(dice.items(), key=lambda item: -item[1])[:per_word]:
            chosen.setdefault(forms[other], None)
    return list(chosen)


def feedback_words(
    query: str, top_texts: list[str], df: Counter[str], rows: int, count: int
) -> list[str]:
    """Pseudo-relevance feedback: the `count` words of the first hits' texts with the highest
    summed IDF, the query's own words excluded."""
    stems = {lexeme(t) for t in content_terms(keyword_terms(query))}
    weight: dict[str, float] = {}
    for text in top_texts:
        forms = {lexeme(w): w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS}
        for stem, word in forms.items():
            if stem not in stems and df[stem] > 1:
                idf = math.log(1 + (rows - df[stem] + 0.5) / (df[stem] + 0.5))
                weight[word] = weight.get(word, 0.0) + idf
    return [word for word, _ in sorted(weight.items(), key=lambda item: -item[1])[:count]]


def query_vector_words(query: str, embedder: Embedder, vocabulary: Vocabulary) -> list[str]:
    """The eight corpus words nearest the whole query's vector, the query's own words excluded."""
    stems = {lexeme(t) for t in content_terms(keyword_terms(query))}
    similarity = vocabulary.vectors @ embedder.embed_query(query)
    words = [vocabulary.words[i] for i in np.argsort(-similarity)[:60]]
    return [w for w in words if lexeme(w) not in stems][:8]


@dataclass(slots=True)
class Expanders:
    """Every expansion variant's inputs, built once for the corpus."""

    embedder: Embedder
    df: Counter[str]
    rows: int
    bags: list[dict[str, str]]
    corpus_words: Vocabulary
    token_words: Vocabulary | None

    @classmethod
    def build(cls, embedder: Embedder, chunks: list[CorpusChunk]) -> Expanders:
        tokens = token_vocabulary(embedder) if isinstance(embedder, LocalEmbedder) else None
        return cls(
            embedder,
            document_frequency(chunks),
            len(chunks),
            word_bags(chunks),
            corpus_vocabulary(embedder, chunks),
            tokens,
        )

    def words(self, query: str, top_texts: list[str]) -> dict[str, list[str]]:
        """Each variant's expansion words; `top_texts` are the vector branch's first hits."""
        terms = query_words(query)
        found = {
            "corpus words near each query word": self.corpus_words.neighbours(
                self.embedder, terms, 3, 0.45
            ),
            "corpus words near the query": query_vector_words(
                query, self.embedder, self.corpus_words
            ),
            "feedback: vector top 3, 8 words": feedback_words(
                query, top_texts[:3], self.df, self.rows, 8
            ),
            "feedback: vector top 5, 10 words": feedback_words(
                query, top_texts[:5], self.df, self.rows, 10
            ),
            "co-occurring corpus words (Dice), 3 a word": cooccurring_words(
                query, self.bags, self.df, 3
            ),
        }
        if self.token_words is not None:
            found["wordllama tokens near each query word"] = self.token_words.neighbours(
                self.embedder, terms, 3, 0.45
            )
        return found
