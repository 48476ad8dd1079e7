"""Gemini embeddings through google-genai: inline `embed_content` calls, and the Batch API.

Chunks are embedded as RETRIEVAL_DOCUMENT and queries as RETRIEVAL_QUERY, at the configured
`output_dimensionality` (768 by default: HNSW stops at 2,000 dimensions). Gemini normalises only
its full 3,072-dimension output, so every vector is L2-normalised here. Inline calls carry at most
100 texts (the API's limit) and retry 429 and 5xx answers with exponential backoff and jitter.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import os
import random
import re
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, quote_plus

import httpx
import numpy as np
import structlog
from google.genai import errors, types
from numpy.typing import NDArray

from app.config import Settings
from app.llm.embeddings import EmbeddingFailed, model_identity, normalise
from app.llm.gemini import close_client, make_client
from app.llm.generation import retry_after_of
from app.privacy import sanitize_text

if TYPE_CHECKING:
    from google import genai

log = structlog.get_logger(__name__)


def _network_errors(name: str) -> tuple[type[Exception], ...]:
    """An httpx error class, and its twin in httpx2, the fork google-genai sends through when
    installed (as it is with google-genai 3), whose classes are not httpx's."""
    classes: list[type[Exception]] = [getattr(httpx, name)]
    try:
        import httpx2

        classes.append(getattr(httpx2, name))
    except ImportError:
        pass
    return tuple(classes)


TRANSPORT_ERRORS = _network_errors("TransportError")
TIMEOUT_ERRORS = _network_errors("TimeoutException")

MAX_TEXTS_PER_CALL = 100
DOCUMENT_TASK = "RETRIEVAL_DOCUMENT"
QUERY_TASK = "RETRIEVAL_QUERY"
_MAX_BACKOFF_SECONDS = 30.0
QUERY_RETRIES = 1
QUERY_WAIT_LIMIT_SECONDS = 2.0  # the longest Retry-After a search's query waits for
QUERY_TIMEOUT_SECONDS = 10.0
# A document call's (a sync's batch of up to 100 texts), for its whole answer as a query's.
DOCUMENT_TIMEOUT_SECONDS = 60.0
_BATCH_DONE = "JOB_STATE_SUCCEEDED"
SUBMISSION_ERRORS: tuple[type[Exception], ...] = (errors.APIError, *TRANSPORT_ERRORS)
# A submission's failures, and a key the client cannot put in a header (non-ASCII).
_UNSUBMITTED: tuple[type[Exception], ...] = (*SUBMISSION_ERRORS, UnicodeError)
_BATCH_FAILED = frozenset(
    {"JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED", "JOB_STATE_PAUSED"}
)
# Gemini's answers to a cancel of a job that is no longer running: FAILED_PRECONDITION (it
# ended), and 404 NOT_FOUND (a job it no longer knows). Asking again cannot change either. Any
# other 400 can: a key Gemini does not know is a 400 INVALID_ARGUMENT, and a cancel refused for
# it, settled, was never asked again once the key was fixed.
_CANCEL_ENDED_STATUS = "FAILED_PRECONDITION"
_CANCEL_GONE_CODE = 404
_KEY_MARK = "<GEMINI_API_KEY>"
# A real Gemini key is 39 characters: a string that long is in no error's own words, so it is
# replaced wherever it stands. A shorter one (a gateway's, a test's "k") only where it stands
# whole: "k" replaced everywhere turned Gemini's "API key not valid" into "API <...>ey not valid".
_SCRUB_ANYWHERE_LENGTH = 16
_KEY_CHARACTER = r"[A-Za-z0-9_\-]"  # what a key is made of: a whole key is not next to one
# ...unless that letter or digit ends an escape (a repr's `\n`, a JSON `\u00e9`, a URL's `%3D`):
# the key then starts right after it, and was kept whole in `line\n<key>` or `?key%3D<key>`.
_AFTER_A_BOUNDARY = (
    rf"(?:(?<!{_KEY_CHARACTER})|(?<=\\[a-z])|(?<=\\x[0-9a-fA-F]{{2}})"
    rf"|(?<=\\u[0-9a-fA-F]{{4}})|(?<=%[0-9a-fA-F]{{2}}))"
)


# How long a close waits for the loop thread's client to close and the thread to end.
_CLOSE_TIMEOUT_SECONDS = 5.0


class _Inline(NamedTuple):
    loop: asyncio.AbstractEventLoop
    client: genai.Client
    thread: threading.Thread


class CancelOutcome(NamedTuple):
    """`cancelled`, `ended` (nothing left to cancel) or `pending` (try again later), and why;
    for a 429, the seconds Gemini asked to wait (its Retry-After)."""

    status: str
    error: str | None = None
    retry_after: float | None = None


class GeminiEmbedder:
    """`gemini:<model>:<dims>`; also submits and reads Batch API jobs for large backlogs."""

    def __init__(
        self,
        settings: Settings,
        *,
        retry_base_seconds: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Made here, where a missing key must fail; again after a fork (`_batch_client`).
        self._client: genai.Client | None = make_client(
            settings, timeout_ms=int(DOCUMENT_TIMEOUT_SECONDS * 1000)
        )
        self._key = settings.gemini_api_key
        self._model = settings.embedding_model or "gemini-embedding-001"
        self._dims = settings.embedding_dims or 768
        self._retries = settings.gemini_embed_max_retries
        self._retry_base = retry_base_seconds
        self._query_timeout_ms = max(
            1, int(min(QUERY_TIMEOUT_SECONDS, settings.gemini_timeout_seconds) * 1000)
        )
        self._settings = settings
        self._sleep = sleep
        self.calls = 0  # inline API calls made, for stats and tests
        # Inline calls go through the async client on a loop of their own, under a deadline for
        # the whole answer (`_bounded`). Started on the first call; its own client, since an
        # async client's connections belong to the loop that opened them (cancels use
        # `_batch_client().aio` on the caller's loop).
        self._inline: _Inline | None = None
        self._inline_lock = threading.Lock()
        _EMBEDDERS.add(self)

    @property
    def identity(self) -> str:
        return model_identity("gemini", self._model, self._dims)

    @property
    def dims(self) -> int:
        return self._dims

    def embed_documents(self, texts: list[str]) -> NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        parts = [
            self._embed(texts[start : start + MAX_TEXTS_PER_CALL], DOCUMENT_TASK)
            for start in range(0, len(texts), MAX_TEXTS_PER_CALL)
        ]
        return np.concatenate(parts)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        """A search's query: someone waits for it, so one retry of a 429 or 5xx at most, none
        of a timeout, none past a Retry-After of 2 s, and a timeout of
        AGMEM_GEMINI_TIMEOUT_SECONDS capped at 10 s (a sync's documents get the full retry budget,
        Retry-After up to 30 s and 60 s).

        The query is sanitized first, as every text the service stores is: it is what a person
        typed (a search, a context prompt, a proxied prompt), `<private>` spans and keys
        included, and it leaves the machine. Nothing left, it is a zero vector (no vector)."""
        text = sanitize_text(text)
        if not text.strip():
            return np.zeros(self._dims, dtype=np.float32)
        vector: NDArray[np.float32] = self._embed(
            [text],
            QUERY_TASK,
            retries=min(self._retries, QUERY_RETRIES),
            timeout_ms=self._query_timeout_ms,
            retry_timeouts=False,
            wait_limit=QUERY_WAIT_LIMIT_SECONDS,
        )[0]
        return vector

    def _config(self, task: str, timeout_ms: int | None = None) -> types.EmbedContentConfig:
        return types.EmbedContentConfig(
            task_type=task,
            output_dimensionality=self._dims,
            http_options=types.HttpOptions(timeout=timeout_ms) if timeout_ms else None,
        )

    def _embed(
        self,
        texts: list[str],
        task: str,
        *,
        retries: int | None = None,
        timeout_ms: int | None = None,
        retry_timeouts: bool = True,
        wait_limit: float = _MAX_BACKOFF_SECONDS,
    ) -> NDArray[np.float32]:
        retries = self._retries if retries is None else retries
        attempt = 0
        while True:
            try:
                self.calls += 1
                answer = self._bounded(texts, task, timeout_ms)
                return self._vectors([e.values for e in answer.embeddings or []], len(texts))
            except TimeoutError:
                # No whole answer within the timeout (a body dripped a few bytes at a time):
                # retried or not as a read timeout is.
                seconds = (timeout_ms or DOCUMENT_TIMEOUT_SECONDS * 1000) / 1000
                asked = None
                if attempt >= retries or not retry_timeouts:
                    raise EmbeddingFailed(
                        "Gemini embeddings unreachable: Timeout: no whole answer within "
                        f"{seconds:g} s"
                    ) from None
                reason: Any = "Timeout"
            except errors.APIError as error:
                asked = retry_after_of(error) if error.code == 429 else None
                if asked is not None and asked > wait_limit:
                    # Longer than the caller waits: every retry before it is refused too.
                    raise EmbeddingFailed(
                        f"Gemini embeddings: {error.code} {error.message} (retry in {asked:.0f} s)",
                        pause_seconds=asked,
                    ) from None
                if not _retryable(error.code) or attempt >= retries:
                    raise EmbeddingFailed(
                        f"Gemini embeddings: {error.code} {error.message}",
                        refused=error.code == 400,  # INVALID_ARGUMENT: these texts, as sent
                    ) from None
                reason = error.code
            except TRANSPORT_ERRORS as error:
                asked = None
                timed_out = isinstance(error, TIMEOUT_ERRORS)
                if attempt >= retries or (timed_out and not retry_timeouts):
                    raise EmbeddingFailed(
                        f"Gemini embeddings unreachable: {describe_error(error, self._key)}"
                    ) from None
                reason = type(error).__name__
            except UnicodeError as error:  # a header it cannot encode: the key, not a text
                raise EmbeddingFailed(
                    f"Gemini embeddings not sent: {describe_error(error, self._key)}"
                ) from None
            delay = min(self._retry_base * 2**attempt, _MAX_BACKOFF_SECONDS)
            delay *= 0.5 + random.random() / 2
            if asked is not None:  # the server's Retry-After, when it sent one
                delay = max(delay, asked)
            log.info("embeddings.retry", attempt=attempt + 1, reason=reason, delay_s=delay)
            self._sleep(delay)
            attempt += 1

    def _bounded(
        self, texts: list[str], task: str, timeout_ms: int | None
    ) -> types.EmbedContentResponse:
        """One `embed_content`, its whole answer within the timeout: the client's timeout bounds
        each read only, and a query answered 8 bytes at a time ran 3.64 s past a 1 s timeout. A
        deadline cancels the request (its connection closed), raising TimeoutError."""
        seconds = (timeout_ms or DOCUMENT_TIMEOUT_SECONDS * 1000) / 1000

        async def call(client: genai.Client) -> types.EmbedContentResponse:
            async with asyncio.timeout(seconds):
                return await client.aio.models.embed_content(
                    model=self._model, contents=list(texts), config=self._config(task, timeout_ms)
                )

        # Sent under the lock: a `close` then comes before the call or after it is on the loop,
        # where the close cancels it; a call sent to a loop already stopped waited for ever.
        with self._inline_lock:
            inline = self._inline_client()
            answer = asyncio.run_coroutine_threadsafe(call(inline.client), inline.loop)
        try:
            return answer.result()
        except concurrent.futures.CancelledError:
            raise EmbeddingFailed(
                "Gemini embeddings: the embedder closed during the call"
            ) from None

    def _inline_client(self) -> _Inline:
        """The inline calls' loop thread and client, started on the first call (the caller
        holds `_inline_lock`)."""
        if self._inline is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="gemini-embeddings", daemon=True
            )
            thread.start()
            timeout_ms = int(DOCUMENT_TIMEOUT_SECONDS * 1000)
            self._inline = _Inline(loop, make_client(self._settings, timeout_ms=timeout_ms), thread)
        return self._inline

    def close(self) -> None:
        """Close the inline calls' client and stop their loop thread (made again by a next
        call): they lived as long as the process, a thread and a kept-alive connection each. A
        call still running is cancelled (an EmbeddingFailed)."""
        with self._inline_lock:
            inline, self._inline = self._inline, None
        if inline is None:
            return
        ended = asyncio.run_coroutine_threadsafe(_shut(inline.client), inline.loop)
        with contextlib.suppress(Exception):
            ended.result(timeout=_CLOSE_TIMEOUT_SECONDS)
        inline.loop.call_soon_threadsafe(inline.loop.stop)
        inline.thread.join(timeout=_CLOSE_TIMEOUT_SECONDS)
        if not inline.thread.is_alive():
            inline.loop.close()

    def _batch_client(self) -> genai.Client:
        """The client of the Batch calls and cancels, made again after a fork dropped it."""
        with self._inline_lock:
            if self._client is None:
                self._client = make_client(
                    self._settings, timeout_ms=int(DOCUMENT_TIMEOUT_SECONDS * 1000)
                )
            return self._client

    def _forget_inline(self) -> None:
        """In a forked child: the loop's thread is the parent's (not running here), both
        clients' connections the parent's (a child's request went on the parent's socket), and
        the lock may be held by a parent's thread. Dropped, not closed: a close would end the
        parent's connections; a next call makes its own."""
        self._inline_lock = threading.Lock()
        self._inline = None
        self._client = None

    def _vectors(self, values: list[list[float] | None], expected: int) -> NDArray[np.float32]:
        if len(values) != expected:
            raise EmbeddingFailed(f"Gemini returned {len(values)} embeddings for {expected} texts")
        if any(v is None or len(v) != self._dims for v in values):
            raise EmbeddingFailed(f"Gemini returned embeddings that are not {self._dims} wide")
        vectors = np.asarray(values, dtype=np.float32)
        # Checked here, where it is the provider's failure: Postgres refuses a NaN in a vector,
        # and that database error charged the rows no attempt (the worker paid for them again
        # every poll); a zero vector has no cosine distance to anything.
        if not np.isfinite(vectors).all():
            raise EmbeddingFailed(
                "Gemini returned embeddings with NaN or infinite values", refused=True
            )
        if not vectors.any(axis=1).all():
            raise EmbeddingFailed("Gemini returned embeddings that are all zeros", refused=True)
        return normalise(vectors)

    def submit_batch(self, texts: list[str], *, label: str) -> str:
        """Start a Batch API job embedding `texts` as documents; returns the job's name."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the SDK marks embedding batches experimental
            try:
                job = self._batch_client().batches.create_embeddings(
                    model=self._model,
                    src=types.EmbeddingsBatchJobSource(
                        inlined_requests=types.EmbedContentBatch(
                            contents=list(texts), config=self._config(DOCUMENT_TASK)
                        )
                    ),
                    config=types.CreateEmbeddingsBatchJobConfig(display_name=label),
                )
            except _UNSUBMITTED as error:
                raise EmbeddingFailed(
                    f"Gemini batch submission failed: {describe_error(error, self._key)}"
                ) from None
        if not job.name:
            raise EmbeddingFailed("Gemini batch submission returned no job name")
        return job.name

    def batch_result(self, name: str, expected: int) -> NDArray[np.float32] | None:
        """The job's vectors in submission order, None while it runs; raises if it failed."""
        try:
            job = self._batch_client().batches.get(name=name)
        except errors.APIError as error:
            if _retryable(error.code):
                return None
            raise EmbeddingFailed(f"Gemini batch {name}: {error.code} {error.message}") from None
        except TRANSPORT_ERRORS:
            return None
        state = str(job.state.value if job.state is not None else "")
        if state in _BATCH_FAILED:
            raise EmbeddingFailed(f"Gemini batch {name} ended {state}")
        if state != _BATCH_DONE:
            return None
        responses = (job.dest.inlined_embed_content_responses if job.dest else None) or []
        values: list[list[float] | None] = []
        for item in responses:
            if item.error is not None or item.response is None or item.response.embedding is None:
                raise EmbeddingFailed(f"Gemini batch {name}: a request failed: {item.error}")
            values.append(item.response.embedding.values)
        return self._vectors(values, expected)

    async def cancel_batch(self, name: str) -> CancelOutcome:
        return await cancel_batch(
            self._batch_client(), name, timeout_ms=self._query_timeout_ms, key=self._key
        )


# Every GeminiEmbedder of the process, for a forked child to reset (weakly: one dropped is gone).
_EMBEDDERS: weakref.WeakSet[GeminiEmbedder] = weakref.WeakSet()


def _forget_inline_in_child() -> None:
    for embedder in list(_EMBEDDERS):
        embedder._forget_inline()


os.register_at_fork(after_in_child=_forget_inline_in_child)


async def _shut(client: genai.Client) -> None:
    """On the inline loop: cancel the calls still running, then close the client."""
    # A task cancelled before its first step is one anyio's wrapper never awaits: a connect
    # attempt just spawned (`connect_tcp`'s `try_connect`) printed "coroutine ... was never
    # awaited". Each such task gets its first step (a loop pass) before the cancel.
    for _ in range(_FIRST_STEP_PASSES):
        if not any(_unstarted(task) for task in asyncio.all_tasks()):
            break
        await asyncio.sleep(0)
    running = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    await close_client(client)


# Passes of the loop a close gives spawned tasks to start: one is enough for a task spawned
# before it; a few more for one that a starting task spawns in its turn.
_FIRST_STEP_PASSES = 8


def _unstarted(task: asyncio.Task[Any]) -> bool:
    coroutine = task.get_coro()
    return (
        inspect.iscoroutine(coroutine)
        and inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED
    )


def cancel_client(settings: Settings) -> genai.Client:
    """A client for cancelling jobs whatever the current embedder is (a switch to `local` keeps
    the key); raises `GeminiNotConfigured` without a key."""
    return make_client(settings, timeout_ms=cancel_timeout_ms(settings))


def cancel_timeout_ms(settings: Settings) -> int:
    """A cancel holds up the sync that asks it (one try; a later sync tries again)."""
    return max(1, int(min(QUERY_TIMEOUT_SECONDS, settings.gemini_timeout_seconds) * 1000))


async def cancel_batch(
    client: genai.Client, name: str, *, timeout_ms: int, key: str | None
) -> CancelOutcome:
    """One `batches.cancel` of the job, no retry: a failure is the caller's to try again.

    Through the async client: a sync cut short (its deadline on cancels, Ctrl-C) stops the
    request, where a worker thread's call ran on to its timeout."""
    try:
        await client.aio.batches.cancel(
            name=name,
            config=types.CancelBatchJobConfig(http_options=types.HttpOptions(timeout=timeout_ms)),
        )
    except errors.APIError as error:
        detail = f"cancel refused: {error.code} {error.status or ''} {error.message or ''}"
        detail = " ".join(scrub_key(detail, key).split())[:1000]
        ended = error.status == _CANCEL_ENDED_STATUS or error.code == _CANCEL_GONE_CODE
        asked = retry_after_of(error) if error.code == 429 else None
        return CancelOutcome("ended" if ended else "pending", detail, asked)
    except TRANSPORT_ERRORS as error:
        return CancelOutcome("pending", f"cancel unreachable: {describe_error(error, key)}"[:1000])
    except Exception as error:  # whatever else the client raises: tried again later
        return CancelOutcome("pending", f"cancel failed: {describe_error(error, key)}"[:1000])
    return CancelOutcome("cancelled")


def describe_error(error: BaseException, key: str | None) -> str:
    """The error's type and message, without the key: the client's errors quote a header's
    value (httpx's for a NUL in it), and a UnicodeEncodeError's repr holds the whole string.
    Its `str`, not its repr, for that reason."""
    return scrub_key(f"{type(error).__name__} {error}".strip(), key)


def scrub_key(text: str, key: str | None) -> str:
    """`text` with `key` replaced in every form an error quotes it in: as is, escaped as a
    str's repr escapes it, as the repr of its UTF-8 bytes, or quoted in a URL. A key under 16
    characters (a real one has 39) only where it stands whole."""
    if not key:
        return text
    anywhere = len(key) >= _SCRUB_ANYWHERE_LENGTH
    forms = {
        key,
        repr(key)[1:-1],
        repr(key.encode("utf-8", "backslashreplace"))[2:-1],
        key.encode("unicode_escape").decode("ascii"),
        quote(key, safe=""),  # a URL's query (`?key=`) quotes `+`, `/` and `=`
        quote_plus(key, safe=""),
    }
    for form in sorted(forms, key=len, reverse=True):
        if not form:
            continue
        if anywhere:
            text = text.replace(form, _KEY_MARK)
        else:
            whole = f"{_AFTER_A_BOUNDARY}{re.escape(form)}(?!{_KEY_CHARACTER})"
            text = re.sub(whole, _KEY_MARK, text)
    return text


def _retryable(code: int | None) -> bool:
    return code is not None and (code == 429 or code >= 500)
