"""The google-genai client, built one way for every Gemini call we make (generation, embeddings).

`AGMEM_GEMINI_BASE_URL` redirects every call to a gateway or a local fake with nothing else
changed; unset means Google's endpoint.
"""

from __future__ import annotations

import httpx
from google import genai
from google.genai import types

from app.config import Settings
from app.errors import AppError


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


class GeminiNotConfigured(AppError):
    status_code = 503


def make_client(settings: Settings, *, timeout_ms: int = 30_000) -> genai.Client:
    if not settings.gemini_api_key:
        raise GeminiNotConfigured("GEMINI_API_KEY is not set")
    options = types.HttpOptions(timeout=timeout_ms)
    if settings.gemini_base_url:
        options = types.HttpOptions(base_url=settings.gemini_base_url, timeout=timeout_ms)
    return genai.Client(api_key=settings.gemini_api_key, http_options=options)
