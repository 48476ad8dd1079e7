"""Derived at capture: observation type, token estimate, the stored (clean, capped) payload."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal

import orjson

from app import exactjson
from app.privacy import Scanned, cap_text, sanitize_json, sanitize_string
from app.textscan import LiteralScanner
from app.tokens import estimate_from_counts, wide_in_utf8

ObservationType = Literal["file_read", "file_write", "code_execution", "search", "web", "other"]

# Tool names as Gemini CLI, Claude Code, Cursor, Antigravity and MCP servers spell them, after
# normalising (last namespace segment, snake_case, lower case).
TOOL_TYPES: dict[str, ObservationType] = {
    **dict.fromkeys(
        (
            "read_file",
            "read_many_files",
            "read",
            "view",
            "view_file",
            "open_file",
            "cat",
            "list_directory",
            "list_dir",
            "ls",
            "notebook_read",
            "read_notebook",
        ),
        "file_read",
    ),
    **dict.fromkeys(
        (
            "write_file",
            "write",
            "edit",
            "edit_file",
            "multi_edit",
            "multiedit",
            "replace",
            "str_replace",
            "create_file",
            "apply_patch",
            "notebook_edit",
            "insert",
            "delete_file",
            "move_file",
        ),
        "file_write",
    ),
    **dict.fromkeys(
        (
            "run_shell_command",
            "run_tests",
            "bash",
            "shell",
            "exec",
            "execute",
            "execute_command",
            "run_command",
            "run_terminal_cmd",
            "terminal",
            "run_code",
            "python",
            "execute_bash",  # OpenHands
            "execute_ipython_cell",
        ),
        "code_execution",
    ),
    **dict.fromkeys(
        (
            "grep",
            "glob",
            "search",
            "search_file_content",
            "find_files",
            "codebase_search",
            "file_search",
            "grep_search",
            "ripgrep",
            "find",
            "search_files",
        ),
        "search",
    ),
    **dict.fromkeys(
        (
            "web_fetch",
            "google_search",
            "google_web_search",
            "web_search",
            "fetch",
            "fetch_url",
            "browse",
            "browser",
            "http_request",
            "curl",
            "browser_action",  # Cline
        ),
        "web",
    ),
    # A to-do list is the agent's plan, not a file: by its `write` part it was a file write,
    # and a summary counted it as one.
    **dict.fromkeys(("todo_write", "write_todos", "todo_read", "read_todos"), "other"),
}

# Editor tools that multiplex on a `command` argument (Anthropic's text editor, Antigravity's).
SUBCOMMAND_TOOLS = frozenset(
    {"str_replace_editor", "str_replace_based_edit_tool", "text_editor", "editor", "file_editor"}
)
SUBCOMMAND_TYPES: dict[str, ObservationType] = {
    "view": "file_read",
    "read": "file_read",
    "create": "file_write",
    "str_replace": "file_write",
    "insert": "file_write",
    "undo_edit": "file_write",
    "write": "file_write",
}

# Unknown names: the first word part found decides, in this order.
NAME_PART_TYPES: tuple[tuple[str, ObservationType], ...] = (
    ("todo", "other"),
    ("todos", "other"),
    ("web", "web"),
    ("browser", "web"),
    ("url", "web"),
    ("http", "web"),
    ("write", "file_write"),
    ("edit", "file_write"),
    ("replace", "file_write"),
    ("patch", "file_write"),
    ("read", "file_read"),
    ("shell", "code_execution"),
    ("exec", "code_execution"),
    ("execute", "code_execution"),
    ("bash", "code_execution"),
    ("command", "code_execution"),
    ("test", "code_execution"),
    ("grep", "search"),
    ("glob", "search"),
    ("search", "search"),
    ("find", "search"),
)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NAMESPACE = re.compile(r".*(?:__|[.:/])")


# A client calls few tools, by the same names on every call: two regex passes a request (~4 µs,
# most of `observation_type`) were spent on the same answers.
@lru_cache(maxsize=1024)
def normalize_tool_name(name: str) -> str:
    """`mcp__fs__readFile` and `default_api.read_file` both become `read_file`."""
    return _CAMEL.sub("_", _NAMESPACE.sub("", name.strip())).lower().replace("-", "_")


def observation_type(function_name: str, function_args: Any) -> ObservationType:
    """Classify a tool call by its name (and, for multiplexing editors, its command)."""
    name = normalize_tool_name(function_name)
    if name in SUBCOMMAND_TOOLS and isinstance(function_args, dict):
        command = function_args.get("command")
        if isinstance(command, str) and command in SUBCOMMAND_TYPES:
            return SUBCOMMAND_TYPES[command]
    known = TOOL_TYPES.get(name)
    if known is not None:
        return known
    parts = set(name.split("_"))
    for part, kind in NAME_PART_TYPES:
        if part in parts:
            return kind
    return "other"


@dataclass(frozen=True, slots=True)
class Payload:
    """A JSON value as it will be stored: sanitized, capped, encoded once."""

    value: Any
    # What the capture writer sends to Postgres: a string value's own text in UTF-8, which the
    # statement stores as a JSON string (`to_jsonb`), else the value's JSON text in UTF-8.
    data: bytes
    original_chars: int  # before any cap: a string's length, else its JSON text's length
    original_bytes: int  # the same, in UTF-8 bytes
    truncated: bool
    # What the sanitizing scanner found in the value's strings (see `prepare_payload`).
    scanned: Scanned = field(default_factory=dict, compare=False, repr=False)
    original_wide: int = 0  # wide characters (CJK, emoji...) before any cap: see app.tokens

    @property
    def original_tokens(self) -> int:
        """The value's token estimate before any cap, by the app's one estimate: the worker
        measures its compressed text the same way, so their difference is the tokens saved."""
        return estimate_from_counts(self.original_chars, self.original_wide)

    @property
    def is_text(self) -> bool:
        """A string value: `data` is its text, not JSON."""
        return isinstance(self.value, str)

    @property
    def json_text(self) -> str:
        """The value's JSON text."""
        return dumps(self.value) if self.is_text else self.data.decode()


def dumps_bytes(value: Any) -> bytes:
    """Compact JSON in UTF-8, non-ASCII kept as is (what Postgres parses into jsonb)."""
    try:
        # orjson encodes a 20 KB payload about 8x faster than the json module (capture profile).
        return orjson.dumps(value, default=_number_as_read)
    except TypeError:
        # What orjson refuses and json accepts: integers beyond 64 bits, nesting past 255 levels.
        # (NaN and Infinity, which are not JSON, orjson writes as null.)
        return exactjson.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _number_as_read(item: Any) -> orjson.Fragment:
    # A number read exactly (`exactjson`), written as its text, as `exactjson.dumps` writes it:
    # a value holding one went whole to json's encoder (24 KB with one float: ~210 against ~9 µs).
    if isinstance(item, Decimal) and item.is_finite():
        return orjson.Fragment(str(item))
    raise TypeError(f"Type is not JSON serializable: {type(item).__name__}")


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is (what Postgres parses into jsonb)."""
    return dumps_bytes(value).decode()


_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))


def _utf8_chars(data: bytes) -> int:
    """The characters of UTF-8 `data`: its bytes less the continuation bytes. A JSON text holds
    non-ASCII characters as they are, so this is its length in characters, counted without
    decoding it (walking the value's strings for the same took ~20 µs for a 12 KB payload)."""
    return len(data.translate(None, _UTF8_CONTINUATION))


def _cap_strings(value: Any, max_chars: int) -> Any:
    if isinstance(value, str):
        return cap_text(value, max_chars)
    if isinstance(value, dict):
        return {key: _cap_strings(item, max_chars) for key, item in value.items()}
    if isinstance(value, list):
        return [_cap_strings(item, max_chars) for item in value]
    return value


class _Unmatched(Exception):
    """The value as sent has no number where the sanitized value has a float (`_exact_numbers`)."""


def _exact_numbers(clean: Any, sent: Any, floats: int) -> Any:
    """`clean`, a value `sanitize_json` made holding `floats` floats, with each float replaced,
    in place, by the number at the same place in `sent` (the same JSON read by `exactjson`).

    Sanitizing maps a list item for item, and an object key for key in order, unless two keys
    become one (a redacted or cleaned key meeting another): so an object of as many keys as
    sent pairs them in order, whatever the keys became, and one of fewer keys is a merge. Each
    number copied is also checked against its float. The walk stops at the last float. Raises
    _Unmatched where the two differ (`clean` is then partly changed: drop it), and
    NumberOutOfRange for a number the database cannot keep, as sanitizing `sent` would.
    """
    if clean.__class__ is float:
        return _exact_number(clean, sent)
    if _copy_numbers(clean, sent, floats):
        raise _Unmatched  # a float dropped with the value of a merged key
    return clean


def _copy_numbers(clean: Any, sent: Any, left: int) -> int:
    """`_exact_numbers`' walk; the floats still to find after `clean`."""
    if clean.__class__ is dict:
        if sent.__class__ is not dict or len(sent) != len(clean):
            raise _Unmatched
        for (key, item), sent_item in zip(clean.items(), sent.values(), strict=True):
            if item.__class__ is float:
                clean[key] = _exact_number(item, sent_item)
                left -= 1
            elif item.__class__ is dict or item.__class__ is list:
                left = _copy_numbers(item, sent_item, left)
            if not left:
                break
        return left
    if sent.__class__ is not list or len(sent) != len(clean):
        raise _Unmatched
    for index, item in enumerate(clean):
        if item.__class__ is float:
            clean[index] = _exact_number(item, sent[index])
            left -= 1
        elif item.__class__ is dict or item.__class__ is list:
            left = _copy_numbers(item, sent[index], left)
        if not left:
            break
    return left


def _exact_number(parsed: float, sent: Any) -> Decimal:
    if not isinstance(sent, Decimal):
        raise _Unmatched
    exactjson.check_decimal(sent)
    if float(sent) != parsed:
        raise _Unmatched
    return sent


def prepare_payload(
    value: Any,
    *,
    max_chars: int,
    max_depth: int,
    scanner: LiteralScanner | None = None,
    exact: Callable[[], Any] | None = None,
) -> Payload:
    """Sanitize every string, then cap the value to about `max_chars` of JSON.

    Sanitizing comes first so that a cut can never split a private span or a secret and leave
    half of it visible. A string is capped head-and-tail; a structure has its long strings capped
    first, and if it is still too large it is stored as its capped JSON text.
    Raises NestingTooDeep past `max_depth`.

    A string is kept as its UTF-8 text (the scan while sanitizing had it already), and the
    statements store it as a JSON string: escaping it as JSON here and parsing that in Postgres
    cost ~8 µs of this process's CPU a 10 KB text. Other values are kept as orjson's UTF-8 JSON:
    decoding it to a `str` and encoding that again for the wire cost two more passes over every
    payload (~15 µs a request on the benchmark's).

    With `scanner` (an `app.privacy.privacy_scanner`), `scanned` holds what it found in the
    value's strings while sanitizing them, for `extract_entities`.

    `exact` gives the value again as sent, every number kept (`exactjson`), when the sanitizing
    walk meets a float: the request's parser made floats of its numbers (`1e-400` as 0.0, `1.50`
    as 1.5). A value without one (most) costs no second walk to find that out. One with one has
    the exact numbers copied into the sanitized value (`_exact_numbers`); sanitizing it again as
    read exactly, which only a merge of two keys still needs, cost about as much again.
    """
    scanned: Scanned = {}
    if isinstance(value, str):
        # A text result is measured as text, not as its JSON escape (which doubles newlines).
        clean, found, utf8 = sanitize_string(value, scanner)
        if scanner is not None and found is not None:
            scanned[id(clean)] = (clean, found)
        if utf8 is None:
            utf8 = clean.encode("utf-8")
        original_chars = len(clean)
        wide = 0 if len(utf8) == original_chars else wide_in_utf8(utf8)
        if original_chars <= max_chars:
            return Payload(clean, utf8, original_chars, len(utf8), False, scanned, wide)
        capped = cap_text(clean, max_chars * 9 // 10)
        return Payload(
            capped, capped.encode("utf-8"), original_chars, len(utf8), True, scanned, wide
        )
    floats: list[float] | None = [] if exact is not None else None
    clean = sanitize_json(
        value,
        max_depth=max_depth,
        scanner=scanner,
        scanned=scanned if scanner else None,
        floats=floats,
    )
    if floats and exact is not None:
        sent = exact()
        try:
            clean = _exact_numbers(clean, sent, len(floats))
        except _Unmatched:
            # Two keys became one (a key redacted or cleaned into another): places no longer
            # match, so the value as sent is sanitized whole, as it was every time before.
            scanned.clear()
            clean = sanitize_json(
                sent, max_depth=max_depth, scanner=scanner, scanned=scanned if scanner else None
            )
    data = dumps_bytes(clean)
    original_bytes = len(data)
    if data.isascii():
        original_chars, wide = original_bytes, 0
    else:
        original_chars, wide = _utf8_chars(data), wide_in_utf8(data)
    if original_chars <= max_chars:
        return Payload(clean, data, original_chars, original_bytes, False, scanned, wide)
    capped = _cap_strings(clean, max(1024, max_chars // 4))
    capped_text = dumps(capped)
    if len(capped_text) > max_chars:
        text = cap_text(capped_text, max_chars * 9 // 10)
        return Payload(
            text, text.encode("utf-8"), original_chars, original_bytes, True, scanned, wide
        )
    return Payload(capped, dumps_bytes(capped), original_chars, original_bytes, True, scanned, wide)
