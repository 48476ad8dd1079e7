"""Embedding providers behind one small interface; the model identity is `provider:model:dims`."""

from __future__ import annotations

import atexit
import copy
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from app.config import Settings
from app.errors import AppError, UpstreamUnavailable
from app.llm.wordllama_pool import SegmentPool

LOCAL_MODEL = "wordllama-l2_supercat"
LOCAL_DIMS = 256


class EmbeddingFailed(UpstreamUnavailable):
    """The provider refused, failed or answered with something that is not the vectors asked for.

    `refused`: it refused the texts themselves (Gemini's 400, a NaN or all-zero vector), so the
    same texts fail again however often they are sent; the worker splits such a batch to find
    the text at fault, and does not retry it after an outage. `pause_seconds`: the provider asked
    for a wait longer than the caller's (a quota's Retry-After); the texts are not at fault."""

    def __init__(
        self, detail: str, *, refused: bool = False, pause_seconds: float | None = None
    ) -> None:
        super().__init__(detail)
        self.refused = refused
        self.pause_seconds = pause_seconds


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed width."""

    @property
    def identity(self) -> str: ...

    @property
    def dims(self) -> int: ...

    def embed_documents(self, texts: list[str]) -> NDArray[np.float32]: ...

    def embed_query(self, text: str) -> NDArray[np.float32]: ...


def model_identity(provider: str, model: str, dims: int) -> str:
    return f"{provider}:{model}:{dims}"


def describe_embedding(settings: Settings) -> dict[str, str | int]:
    """The configured provider, model and width, without loading any model."""
    if settings.embedding_provider == "local":
        return {"provider": "local", "model": LOCAL_MODEL, "dims": LOCAL_DIMS}
    if settings.embedding_provider == "gemini":
        return {
            "provider": "gemini",
            "model": settings.embedding_model or "gemini-embedding-001",
            "dims": settings.embedding_dims or 768,
        }
    return {
        "provider": "sentence-transformers",
        "model": settings.embedding_model or "all-MiniLM-L6-v2",
        "dims": settings.embedding_dims or 384,
    }


def normalise(vectors: NDArray[np.float32]) -> NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: NDArray[np.float32] = (vectors / norms).astype(np.float32)
    return normalised


class LocalEmbedder:
    """wordllama with the weights its wheel ships: offline, no torch, ~40k texts/s on CPU."""

    def __init__(self) -> None:
        import wordllama

        # The loader looks for weights in a cache folder by default; the wheel carries them in the
        # package itself, and nothing may be downloaded at run time.
        self._model = wordllama.WordLlama.load(
            cache_dir=Path(wordllama.__file__).parent, disable_download=True
        )
        # A private copy without padding: the model's own tokenizer pads every batch.
        tokenizer = copy.deepcopy(self._model.tokenizer)
        tokenizer.no_padding()
        self._pool = SegmentPool(tokenizer, self._model.embedding)

    @property
    def identity(self) -> str:
        return model_identity("local", LOCAL_MODEL, LOCAL_DIMS)

    @property
    def dims(self) -> int:
        return LOCAL_DIMS

    def embed_documents(self, texts: list[str]) -> NDArray[np.float32]:
        """wordllama's mean of token vectors, normalised: the vectors `WordLlama.embed` gives (to
        float rounding, ~1e-7) at a fraction of its cost (see app/llm/wordllama_pool.py)."""
        if not texts:
            return np.zeros((0, LOCAL_DIMS), dtype=np.float32)
        return normalise(self._pool.pooled(texts))

    def embed_query(self, text: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = self.embed_documents([text])[0]
        return vector


@lru_cache(maxsize=1)
def local_embedder() -> LocalEmbedder:
    return LocalEmbedder()


class EmbeddingProviderUnavailable(AppError):
    status_code = 503


class SentenceTransformerEmbedder:
    """Any sentence-transformers model from a local path or the local cache; never downloads."""

    def __init__(self, model: str, dims: int | None) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise EmbeddingProviderUnavailable(
                "AGMEM_EMBEDDING_PROVIDER=sentence-transformers needs the optional extra: "
                "uv sync --extra sentence-transformers"
            ) from None
        try:
            self._model = SentenceTransformer(model, local_files_only=True)
        except Exception as error:  # a missing or broken model folder, in whatever form
            raise EmbeddingProviderUnavailable(
                f"cannot load sentence-transformers model {model!r}: {error}"
            ) from None
        # sentence-transformers 5 renamed the method and warns on the old name; 3.x/4.x lack it.
        dimension_of = getattr(self._model, "get_embedding_dimension", None)
        if dimension_of is None:
            dimension_of = self._model.get_sentence_embedding_dimension
        width = int(dimension_of() or 0)
        if dims is not None and dims != width:
            raise EmbeddingProviderUnavailable(
                f"AGMEM_EMBEDDING_DIMS={dims} but model {model!r} has {width} dimensions"
            )
        self._name = model
        self._dims = width

    @property
    def identity(self) -> str:
        return model_identity("sentence-transformers", self._name, self._dims)

    @property
    def dims(self) -> int:
        return self._dims

    def embed_documents(self, texts: list[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        vectors = np.asarray(self._model.encode(texts, batch_size=64), dtype=np.float32)
        return normalise(vectors)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        vector: NDArray[np.float32] = self.embed_documents([text])[0]
        return vector


# One embedder per configuration and process. Every search and context request asked for one:
# a GeminiEmbedder's client cost ~65 ms of CPU to build (measured), on the event loop, and a
# sentence-transformers model was loaded from disk again.
_loaded: dict[tuple[object, ...], Embedder] = {}
_loading = threading.Lock()
# How many running apps use each configuration's embedder: an app's end closes it only when no
# other app in the process still does (a test's app, or two apps of the same settings).
_holders: dict[tuple[object, ...], int] = {}


def close_embedders() -> None:
    """Close what the process's embedders hold open (a Gemini embedder's loop thread and its
    client), at the end of the process's work: the CLI's exit. Each stays usable: a next call
    opens them again. An app closes only its own, when it stops (`release_embedder`)."""
    for embedder in list(_loaded.values()):
        _close(embedder)


def hold_embedder(settings: Settings) -> None:
    """An app starts using the embedder its settings ask for; `release_embedder` at its end."""
    key = _key(settings)
    with _loading:
        _holders[key] = _holders.get(key, 0) + 1


def release_embedder(settings: Settings) -> None:
    """An app's end: its embedder closed unless another app holding the same one still runs
    (closing every embedder of the process, the first app to stop cut the others' loop threads
    and clients). Blocks for the close: run it off the event loop."""
    key = _key(settings)
    with _loading:
        left = _holders.get(key, 0) - 1
        if left > 0:
            _holders[key] = left
            return
        _holders.pop(key, None)
        embedder = _loaded.get(key)
    if embedder is not None:
        _close(embedder)


def _close(embedder: Embedder) -> None:
    close = getattr(embedder, "close", None)
    if callable(close):
        close()


def _reset_in_child() -> None:
    # A forked child inherits the lock as held when a parent's thread was building an embedder.
    global _loading
    _loading = threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)
# A command's exit closes whatever is still open (a server's lifespan closes only its own embedder,
# and only when no other app of the process holds it: release_embedder).
atexit.register(close_embedders)


def check_embedder(settings: Settings) -> None:
    """Build the configured provider now, raising its reason if it cannot be built (a missing
    key, extra or model): `local` always can, and loads on first use."""
    if settings.embedding_provider != "local":
        get_embedder(settings)


def get_embedder(settings: Settings) -> Embedder:
    """The embedder the settings ask for, built once per process for the same settings."""
    if settings.embedding_provider == "local":
        return local_embedder()
    key = _key(settings)
    with _loading:
        embedder = _loaded.get(key)
        if embedder is None:
            embedder = _loaded[key] = _load_embedder(settings)
    return embedder


def _key(settings: Settings) -> tuple[object, ...]:
    return (
        settings.embedding_provider,
        settings.embedding_model,
        settings.embedding_dims,
        settings.gemini_api_key,
        settings.gemini_base_url,
        settings.gemini_embed_max_retries,
        settings.gemini_timeout_seconds,
    )


def _load_embedder(settings: Settings) -> Embedder:
    described = describe_embedding(settings)
    if settings.embedding_provider == "gemini":
        from app.llm.gemini import GeminiNotConfigured
        from app.llm.gemini_embeddings import GeminiEmbedder

        if not settings.gemini_api_key:  # said for embeddings: generation works without it
            raise GeminiNotConfigured(
                "AGMEM_EMBEDDING_PROVIDER=gemini needs GEMINI_API_KEY, which is not set"
            )
        return GeminiEmbedder(settings)
    return SentenceTransformerEmbedder(str(described["model"]), settings.embedding_dims)
