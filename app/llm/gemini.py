"""The google-genai client, built one way for every Gemini call we make (generation, embeddings).

`AGMEM_GEMINI_BASE_URL` redirects every call to a gateway or a local fake with nothing else
changed; unset means Google's endpoint.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from app.config import Settings
from app.errors import AppError

if TYPE_CHECKING:
    from google import genai


class GeminiNotConfigured(AppError):
    status_code = 503


def load_client_library(settings: Settings) -> None:
    """Import google-genai now if a Gemini key is set: a server's start, not the first request
    that builds a client (a resume), then pays its ~0.3 s of import."""
    if settings.gemini_api_key:
        import google.genai  # noqa: F401


def make_client(settings: Settings, *, timeout_ms: int = 30_000) -> genai.Client:
    if not settings.gemini_api_key:
        raise GeminiNotConfigured("GEMINI_API_KEY is not set")
    # Imported here, by the first client built: google-genai costs ~0.3 s of CPU to import
    # (google.genai.types alone), which every process paid, `agmem mcp` and the worker with a
    # local provider and no key too, for a client they never build.
    from google import genai
    from google.genai import types

    options = types.HttpOptions(timeout=timeout_ms)
    if settings.gemini_base_url:
        options = types.HttpOptions(base_url=settings.gemini_base_url, timeout=timeout_ms)
    return genai.Client(api_key=settings.gemini_api_key, http_options=options)


async def close_client(client: genai.Client) -> None:
    """Close both of the client's transports (google-genai keeps a sync and an async one). A
    close that fails leaves nothing for the caller to do: it must not hide why the caller ends."""
    with contextlib.suppress(Exception):
        client.close()
    with contextlib.suppress(Exception):
        await client.aio.aclose()


class SharedClient:
    """One client for a process's calls of one kind, reused by each: building one costs ~45 ms
    of CPU (on the event loop, for a request), and each kept its own connection open for the
    process's life. Built by the first call, not at the start (most processes never make one);
    `close` at the process's end closes its connections."""

    def __init__(self, settings: Settings, *, timeout_ms: int) -> None:
        self._settings = settings
        self._timeout_ms = timeout_ms
        self._client: genai.Client | None = None

    def get(self) -> genai.Client:
        if self._client is None:
            self._client = make_client(self._settings, timeout_ms=self._timeout_ms)
        return self._client

    async def close(self) -> None:
        """Close the client's connections; a call after it builds a new client."""
        client, self._client = self._client, None
        if client is not None:
            await close_client(client)
