"""Entities of an observation, found by patterns: files, functions, classes, errors, commands, URLs
and packages (the Commander memory design's list). Stored in `observations.entities`.

Only a bounded window of each text is scanned (head and tail), so a capped 64 KB result costs
the same as a small one, and each kind keeps at most `MAX_PER_KIND` distinct values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

ENTITY_KINDS = ("files", "functions", "classes", "errors", "commands", "urls", "packages")
MAX_PER_KIND = 20
MAX_VALUE_CHARS = 300
SCAN_HEAD = 12_000
SCAN_TAIL = 4_000

# Argument keys that name files, commands or URLs directly, in every tool's spelling.
FILE_KEYS = frozenset(
    {
        "file_path",
        "filepath",
        "path",
        "absolute_path",
        "file",
        "filename",
        "target_file",
        "notebook_path",
        "paths",
        "file_paths",
        "dir_path",
        "directory",
        "source",
        "destination",
    }
)
COMMAND_KEYS = frozenset({"command", "cmd", "script", "shell_command"})
URL_KEYS = frozenset({"url", "urls", "uri", "href"})

_EXTENSIONS = (
    "py|pyi|ts|tsx|js|jsx|mjs|cjs|json|jsonl|md|mdx|rs|go|java|kt|kts|rb|php|c|h|cc|cpp|hpp|cs|"
    "swift|m|scala|sh|bash|zsh|ps1|sql|yaml|yml|toml|ini|cfg|conf|env|lock|txt|csv|html|css|scss|"
    "vue|svelte|proto|graphql|tf|dockerfile|xml|gradle|ipynb|r|lua|dart|ex|exs|erl|hs|ml|zig|nix"
)
_FILE = re.compile(
    rf"(?<![\w/.\-@:])((?:~|\.{{1,2}})?/?(?:[\w.\-@+]+/)*[\w.\-@+]*\.(?:{_EXTENSIONS}))(?![\w/])"
    r"(?::\d+)?",
    re.IGNORECASE,
)
_URL = re.compile(r"https?://[^\s\"'<>`)\]}\\]+")
_FUNCTION = re.compile(
    r"(?:\bdef|\bfunction\*?|\bfunc(?:\s*\([^)]*\))?|\bfn)\s+([A-Za-z_$][\w$]*)"
    r"|\b(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=\s*(?:async\s*)?(?:\([^)]*\)|\w+)\s*=>"
)
_CLASS = re.compile(r"\b(?:class|interface|struct|trait|enum|type)\s+([A-Z][\w]*)")
_ERROR = re.compile(
    r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception|Failure|Panic))\b"
    r"|\b(E(?:NOENT|ACCES|PERM|EXIST|CONNREFUSED|CONNRESET|ADDRINUSE|TIMEDOUT|PIPE|NOTDIR|ISDIR))\b"
    r"|\b(error (?:TS|CS|E)\d{3,5})\b"
    r"|\b(Segmentation fault|Traceback|panicked at|command not found|Permission denied)"
)
_PACKAGE_INSTALL = re.compile(
    r"\b(?:pip3?\s+install|uv\s+(?:add|pip\s+install)|poetry\s+add|npm\s+(?:install|i|add)"
    r"|pnpm\s+(?:add|install)|yarn\s+add|bun\s+add|cargo\s+add|go\s+get|gem\s+install"
    r"|apt(?:-get)?\s+install|brew\s+install)((?:\s+(?:-{1,2}[\w\-=]+|[@\w][\w.\-/@=<>~^\[\]]*))+)"
)
_IMPORT = re.compile(
    r"^\s*(?:from\s+([A-Za-z_][\w]*)[\w.]*\s+import\b|import\s+([A-Za-z_][\w]*))"
    r"|\b(?:require\(|from\s+|import\s+)[\"']((?:@[\w\-.]+/)?[\w\-][\w\-.]*)(?:/[^\"']*)?[\"']",
    re.MULTILINE,
)


class _Collector:
    def __init__(self) -> None:
        self.found: dict[str, dict[str, None]] = {kind: {} for kind in ENTITY_KINDS}

    def add(self, kind: str, value: str) -> None:
        value = value.strip()
        bucket = self.found[kind]
        if value and len(bucket) < MAX_PER_KIND:
            bucket[value[:MAX_VALUE_CHARS]] = None

    def result(self) -> dict[str, list[str]]:
        return {kind: list(values) for kind, values in self.found.items() if values}


def _window(text: str) -> str:
    if len(text) <= SCAN_HEAD + SCAN_TAIL:
        return text
    return text[:SCAN_HEAD] + "\n" + text[-SCAN_TAIL:]


def _strings(value: Any) -> Iterable[tuple[str, str]]:
    """(key, string) pairs of a JSON value; the key is that of the nearest enclosing object."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        key, item = stack.pop()
        if isinstance(item, str):
            yield key, item
        elif isinstance(item, dict):
            stack.extend((str(k).lower(), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((key, v) for v in item)


def _scan(collector: _Collector, text: str) -> None:
    text = _window(text)
    for match in _FILE.finditer(text):
        collector.add("files", match.group(1))
    for match in _URL.finditer(text):
        collector.add("urls", match.group(0).rstrip(".,;:"))
    for match in _FUNCTION.finditer(text):
        collector.add("functions", match.group(1) or match.group(2))
    for match in _CLASS.finditer(text):
        collector.add("classes", match.group(1))
    for match in _ERROR.finditer(text):
        collector.add("errors", next(group for group in match.groups() if group))
    for match in _PACKAGE_INSTALL.finditer(text):
        for token in match.group(1).split():
            if not token.startswith("-"):
                collector.add("packages", token)
    for match in _IMPORT.finditer(text):
        collector.add("packages", next(group for group in match.groups() if group))


def extract_entities(*values: Any) -> dict[str, list[str]]:
    """Entities found in the given JSON values (tool arguments, results), by kind."""
    collector = _Collector()
    for value in values:
        for key, text in _strings(value):
            if key in FILE_KEYS and "\n" not in text and len(text) < 1024:
                collector.add("files", text)
            elif key in COMMAND_KEYS and len(text) < 4096:
                collector.add("commands", text.split("\n", 1)[0])
            elif key in URL_KEYS and text.startswith(("http://", "https://")):
                collector.add("urls", text)
            _scan(collector, text)
    return collector.result()


def merge_entities(*groups: dict[str, list[str]]) -> dict[str, list[str]]:
    """Union of entity groups, first-seen order, still at most MAX_PER_KIND per kind."""
    collector = _Collector()
    for group in groups:
        for kind, values in group.items():
            if kind in collector.found:
                for value in values:
                    collector.add(kind, value)
    return collector.result()


def entity_text(entities: dict[str, list[str]]) -> str:
    """One searchable line per kind, for the search index (`files: app/main.py, ...`)."""
    return "\n".join(f"{kind}: {', '.join(values)}" for kind, values in entities.items() if values)
