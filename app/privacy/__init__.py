"""Privacy and hygiene for any text before it is stored or sent to an LLM.

Pure functions, used on the capture hot path, by the transcript sync and by the worker before it
calls Gemini. Every regex is compiled once, and each one runs only when a cheap substring test
says its pattern could occur, so clean text costs a handful of `in` scans.

By rule family: `clean` (NUL, lone surrogates), `private` (`<private>` spans, our `<memory>`
blocks), `tokens` (credentials by their shape), `commands` (client passwords on a command
line); credentials by their name: `names` (what names one, what a value under one is), and the
rules `assignments`, `options`, `lists`, `connections`; `engine` (the rules in order, the one
scan, text and JSON), `cap` (head and tail kept), `version` (RULES_VERSION).
"""

from app.privacy.cap import ELISION_MARKER, ELISION_START, cap_text, elision_marker
from app.privacy.clean import (
    clean_text,
    lone_surrogates_replaced_everywhere,
    surrogates_replaced,
)
from app.privacy.common import REDACTED
from app.privacy.engine import (
    DEFAULT_MAX_DEPTH,
    NestingTooDeep,
    Scanned,
    json_depth,
    privacy_scanner,
    redact_json,
    redact_json_text,
    redact_secrets,
    redact_secrets_lines,
    sanitize_json,
    sanitize_string,
    sanitize_text,
    strip_private,
    strip_private_lines,
)
from app.privacy.names import basic_credentials, reference
from app.privacy.version import RULES_GENERATION, RULES_VERSION

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "ELISION_MARKER",
    "ELISION_START",
    "REDACTED",
    "RULES_GENERATION",
    "RULES_VERSION",
    "NestingTooDeep",
    "Scanned",
    "basic_credentials",
    "cap_text",
    "clean_text",
    "elision_marker",
    "json_depth",
    "lone_surrogates_replaced_everywhere",
    "privacy_scanner",
    "redact_json",
    "redact_json_text",
    "redact_secrets",
    "redact_secrets_lines",
    "reference",
    "sanitize_json",
    "sanitize_string",
    "sanitize_text",
    "strip_private",
    "strip_private_lines",
    "surrogates_replaced",
]
