"""What a serving process pays at its start, so that its first request does not.

The command line defers both (most commands need neither); `agmem serve` pays them in its
lifespan, before it answers, and `agmem mcp` beside its client's first messages.
"""

from __future__ import annotations

from app.config import Settings
from app.llm.gemini import load_client_library
from app.textscan import compile_all


def warm_up(settings: Settings) -> None:
    """Compile the scanners (~130 ms of CPU, else paid by the first long text scanned) and, with
    a Gemini key, import google-genai (~0.3-0.4 s, else paid by the first client built)."""
    compile_all()
    load_client_library(settings)
