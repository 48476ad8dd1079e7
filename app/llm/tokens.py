"""Token estimates for text we have not sent anywhere: about four characters per token."""

from __future__ import annotations

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """A rough token count (ceil(chars / 4)); Gemini's own counts replace it when known."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
