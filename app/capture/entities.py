"""Entities of an observation, found by patterns: files, functions, classes, errors, commands, URLs
and packages (the Commander memory design's list). Stored in `observations.entities`.

Only a bounded window of each text is scanned (head and tail), so a capped 64 KB result costs
the same as a small one, and each kind keeps at most `MAX_PER_KIND` distinct values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from app.privacy import Scanned, privacy_scanner
from app.textscan import LiteralScanner

ENTITY_KINDS = ("files", "functions", "classes", "errors", "commands", "urls", "packages")
MAX_PER_KIND = 20
MAX_VALUE_CHARS = 300
SCAN_HEAD = 4_000
SCAN_TAIL = 1_000

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

# Speed: this runs on every capture, so every pattern starts with a literal (Python's regex
# engine then skips ahead with a fast search) and anything before the literal (a path's folders,
# an exception's name) is found by walking back from the match, not by the regex.
_EXTENSIONS = (
    "py|pyi|ts|tsx|js|jsx|mjs|cjs|json|jsonl|md|mdx|rs|go|java|kt|kts|rb|php|c|h|cc|cpp|hpp|cs|"
    "swift|scala|sh|bash|zsh|ps1|sql|yaml|yml|toml|ini|cfg|conf|env|lock|txt|csv|html|css|scss|"
    "vue|svelte|proto|graphql|tf|xml|gradle|ipynb|lua|dart|ex|exs|erl|hs|ml|zig|nix"
)
_EXTENSION_SET = frozenset(_EXTENSIONS.split("|"))


def _trie(words: Iterable[str]) -> str:
    """An alternation of `words` shaped as a trie (`c(?:c|fg|...)?`): each character is tested
    once, so a word that is no extension fails after a character or two."""
    tree: dict[str, Any] = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def alternation(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + alternation(child) for char, child in sorted(node.items())]
        branches = [branch for branch in branches if branch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return alternation(tree)


# A dot and a whole word that is a known extension, not followed by "/" (the lookahead makes the
# word whole: "pyc" is not "py"). A flat alternation `\.(?:py|pyi|ts|...)` tried all 60 names at
# every dot (half of all entity CPU); any word after a dot, then a set lookup, made a match
# object for every `self.x` of a code text (7.7 µs a value); the trie fails inside the regex
# engine on those (5.3 µs), and finds the same matches.
_FILE_EXTENSION = re.compile(rf"\.({_trie(sorted(_EXTENSION_SET))})(?![\w/])")
_PATH_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./~@+-"
_IDENTIFIER_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
_URL = re.compile(r"https?://[^\s\"'<>`)\]}\\]+")
_FUNCTIONS = (
    re.compile(r"def(?<![\w.]def)\s+([A-Za-z_]\w*)"),
    re.compile(r"function(?<![\w.]function)\*?\s*\*?\s*([A-Za-z_$][\w$]*)"),
    re.compile(r"func(?<![\w.]func)\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)"),
    re.compile(r"fn(?<![\w.]fn)\s+([A-Za-z_]\w*)"),
    re.compile(
        r"const(?<![\w.]const)\s+([A-Za-z_$][\w$]*)\s*=\s*(?:async\s*)?(?:\([^)]*\)|\w+)\s*=>"
    ),
)
_CLASSES = tuple(
    re.compile(rf"{word}(?<![\w.]{word})\s+([A-Z]\w*)")
    for word in ("class", "interface", "struct", "trait", "enum")
)
_ERROR_SUFFIX = re.compile(r"(?:Error|Exception)\b")
_ERROR_LITERALS = re.compile(
    r"E(?<!\wE)(?:NOENT|ACCES|PERM|EXIST|CONNREFUSED|CONNRESET|ADDRINUSE|TIMEDOUT|PIPE|NOTDIR"
    r"|ISDIR)\b"
)
_ERROR_PHRASES = tuple(
    re.compile(phrase)
    for phrase in (
        r"Traceback \(most recent call last\)",
        r"Segmentation fault",
        r"panicked at",
        r"command not found",
        r"Permission denied",
        r"error TS\d{3,5}",
        r"error CS\d{3,5}",
    )
)
_PACKAGE_ARGS = r"((?:[ \t]+(?:-{1,2}[\w\-=]+|[@\w][\w.\-/@=<>~^\[\]]*))+)"


_INSTALL_COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("install", ("pip", "pip3", "uv pip", "npm", "pnpm", "gem", "brew", "apt", "apt-get")),
    ("add", ("uv", "poetry", "yarn", "pnpm", "bun", "cargo", "npm")),
    ("get", ("go",)),
    ("i", ("npm",)),
)


def _after(verb: str, tools: tuple[str, ...]) -> re.Pattern[str]:
    """`<tool> <verb> args`, found from the verb (a literal) and checked back with lookbehinds."""
    behind = "|".join(f"(?<={re.escape(tool)} {verb})" for tool in tools)
    return re.compile(rf"{verb}(?:{behind})" + _PACKAGE_ARGS)


_PACKAGE_INSTALLS = tuple(_after(verb, tools) for verb, tools in _INSTALL_COMMANDS)
_PY_IMPORTS = (
    re.compile(r"import(?<![\w.]import)[ \t]+([A-Za-z_]\w*)"),
    re.compile(r"from(?<![\w.]from)[ \t]+([A-Za-z_]\w*)[\w.]*[ \t]+import\b"),
)
_JS_IMPORTS = (
    re.compile(r"require\(\s*[\"']((?:@[\w\-.]+/)?[\w\-][\w\-.]*)(?:/[^\"']*)?[\"']"),
    re.compile(r"from(?<![\w.]from)\s+[\"']((?:@[\w\-.]+/)?[\w\-][\w\-.]*)(?:/[^\"']*)?[\"']"),
)


# A literal every match of a pattern needs in the text (its own prefix, or what its lookbehinds
# require): a pattern runs only when one is present. A substring test scans about twice as fast
# as the regex engine's prefix search, and most texts miss most of these words.
_GATES: dict[re.Pattern[str], tuple[str, ...]] = {
    _FILE_EXTENSION: (".",),
    _URL: ("http",),
    **{
        pattern: (word,)
        for pattern, word in zip(
            _FUNCTIONS, ("def", "function", "func", "fn", "const"), strict=True
        )
    },
    **{
        pattern: (word,)
        for pattern, word in zip(
            _CLASSES, ("class", "interface", "struct", "trait", "enum"), strict=True
        )
    },
    _ERROR_SUFFIX: ("Error", "Exception"),
    **{
        pattern: (phrase,)
        for pattern, phrase in zip(
            _ERROR_PHRASES,
            (
                "Traceback",
                "Segmentation fault",
                "panicked at",
                "command not found",
                "Permission denied",
                "error TS",
                "error CS",
            ),
            strict=True,
        )
    },
    # The lookbehinds require `<tool> <verb>` itself ("uv add", not any " add" in prose).
    **{
        pattern: tuple(f"{tool} {verb}" for tool in tools)
        for pattern, (verb, tools) in zip(_PACKAGE_INSTALLS, _INSTALL_COMMANDS, strict=True)
    },
    _PY_IMPORTS[0]: ("import",),
    _PY_IMPORTS[1]: ("import",),
    _JS_IMPORTS[0]: ("require(",),
    _JS_IMPORTS[1]: ("from",),
}


# Finer gates for patterns whose words are common in any text but that rarely match: hyperscan
# expressions over the UTF-8 bytes, each matching wherever its pattern can (lookbehinds dropped,
# `\s` widened to every byte a Unicode space can use, `\w` to every non-ASCII byte), found in
# the same pass as the literals. Such a pattern runs only when its literal and its gate occur.
_SPACE = r"[\x09-\x0d\x1c-\x20\x80-\xff]"
_REGEX_GATES: dict[re.Pattern[str], str] = {
    _FUNCTIONS[0]: rf"def{_SPACE}+[A-Za-z_]",
    _FUNCTIONS[2]: rf"func{_SPACE}",
    _FUNCTIONS[3]: rf"fn{_SPACE}+[A-Za-z_]",
    **{
        pattern: rf"{word}{_SPACE}+[A-Z]"
        for pattern, word in zip(
            _CLASSES, ("class", "interface", "struct", "trait", "enum"), strict=True
        )
    },
    _PY_IMPORTS[0]: r"import[ \t]+[A-Za-z_]",
    _PY_IMPORTS[1]: r"from[ \t]+[A-Za-z_][0-9A-Za-z_.\x80-\xff]*[ \t]+import",
    _JS_IMPORTS[1]: rf"from{_SPACE}+[\"']",
    # Has no literal gate (it would be "E"): gated here alone, it no longer runs on every text.
    _ERROR_LITERALS: _ERROR_LITERALS.pattern.replace("(?<!\\wE)", "").replace("\\b", ""),
}
_GATE_NAMES = {pattern: f"gate:{pattern.pattern}" for pattern in _REGEX_GATES}

# All the gate literals and expressions, found in one pass over a text (see app/textscan.py).
_SCANNER = LiteralScanner(
    (literal for literals in _GATES.values() for literal in literals),
    gates={_GATE_NAMES[pattern]: expression for pattern, expression in _REGEX_GATES.items()},
)


# The same names found in the pass that sanitizes a payload (`app/privacy/`), over the whole
# text: a superset of what the window holds, and gating runs a pattern whenever its literal may
# occur, so the entities found are the same, for one hyperscan pass and one UTF-8 encoding of
# each text instead of two (~15 µs of a 1-20 KB text's ~60 µs of entity work).
SANITIZE_SCANNER = privacy_scanner(_SCANNER.literals, _SCANNER.gates)
_NAMES = frozenset(_SCANNER.names)

# Each gate literal's patterns; a scan runs the union of those of the literals it found.
_PATTERNS_BY_LITERAL: dict[str, frozenset[re.Pattern[str]]] = {
    literal: frozenset(pattern for pattern, gates in _GATES.items() if literal in gates)
    for literal in _SCANNER.literals
}
_UNGATED: frozenset[re.Pattern[str]] = frozenset({_ERROR_LITERALS})


def _active(text: str) -> _Steps:
    """The steps that can find something in `text`: the ungated patterns' and those whose
    literal occurs."""
    return _patterns_for(_SCANNER.present(text))


# Few distinct sets of found literals and gates occur (every short text has all the gates), and
# working out their patterns cost ~4 µs a text: about as much as finding them.
@lru_cache(maxsize=1024)
def _patterns_for(found: frozenset[str]) -> _Steps:
    candidates = _UNGATED.union(
        *(_PATTERNS_BY_LITERAL[name] for name in found if name in _PATTERNS_BY_LITERAL)
    )
    return tuple(
        (pattern, extract)
        for pattern, extract in _STEPS
        if pattern in candidates and (pattern not in _GATE_NAMES or _GATE_NAMES[pattern] in found)
    )


# Long enough for most paths and identifiers in one step.
_WALK_CHUNK = 64


def _walk_back(text: str, end: int, allowed: str) -> int:
    """Where the run of `allowed` characters that ends at `end` starts."""
    # rstrip is a C loop; walking back a character at a time in Python cost ~7 µs per path. It
    # strips a slice ending at `end`: sliced from the start of the text, every match copied all
    # the text before it, so the slices are taken a chunk at a time, back from `end`.
    while end > 0:
        start = max(0, end - _WALK_CHUNK)
        kept = len(text[start:end].rstrip(allowed))
        if kept:
            return start + kept
        end = start
    return 0


def _at_line_start(text: str, position: int) -> bool:
    line_start = text.rfind("\n", 0, position) + 1
    return text[line_start:position].strip() == ""


# What each pattern's matches add, one function per shape of match. `_patterns_for` hands a
# scan the (pattern, extract) pairs it must run, in this order (the order values are found in):
# testing each of the 29 patterns against a set of the active ones hashed the pattern every time
# (`re.Pattern` does not cache its hash, and hashes its compiled code), ~4 µs a request.
_Add = Callable[[str, str], None]
_Extract = Callable[[_Add, str, re.Pattern[str]], None]
_Steps = tuple[tuple[re.Pattern[str], _Extract], ...]


def _files(add: _Add, text: str, pattern: re.Pattern[str]) -> None:
    for match in pattern.finditer(text):
        dot, end = match.span()
        # `_walk_back`'s first chunk inline: most paths start within it (~1 µs a text of ~7
        # matches less than calling it for each).
        chunk = dot - _WALK_CHUNK if dot > _WALK_CHUNK else 0
        kept = len(text[chunk:dot].rstrip(_PATH_CHARS))
        start = chunk + kept if kept or not chunk else _walk_back(text, chunk, _PATH_CHARS)
        if start < dot:
            if text[start - 1 : start] == "\\" and text[start] in "ntr":
                start += 1  # an escaped newline or tab in JSON-ish text, not part of the path
                if start == dot:
                    continue
            add("files", text[start:end].lstrip("."))


def _urls(add: _Add, text: str, pattern: re.Pattern[str]) -> None:
    for match in pattern.finditer(text):
        add("urls", match.group(0).rstrip(".,;:"))


def _first_group(kind: str) -> _Extract:
    def extract(add: _Add, text: str, pattern: re.Pattern[str]) -> None:
        for match in pattern.finditer(text):
            add(kind, match.group(1))

    return extract


def _error_names(add: _Add, text: str, pattern: re.Pattern[str]) -> None:
    for match in pattern.finditer(text):
        start = _walk_back(text, match.start(), _IDENTIFIER_CHARS)
        if text[start : start + 1].isupper():
            add("errors", text[start : match.end()])


def _error_codes(add: _Add, text: str, pattern: re.Pattern[str]) -> None:
    for match in pattern.finditer(text):
        add("errors", match.group(0))


def _error_phrases(add: _Add, text: str, pattern: re.Pattern[str]) -> None:
    for match in pattern.finditer(text):
        add("errors", match.group(0).split(" (", 1)[0])


def _installed(add: _Add, text: str, pattern: re.Pattern[str]) -> None:
    for match in pattern.finditer(text):
        for token in match.group(1).split():
            if not token.startswith("-"):
                add("packages", token.strip("'\""))


def _python_imports(add: _Add, text: str, pattern: re.Pattern[str]) -> None:
    for match in pattern.finditer(text):
        if _at_line_start(text, match.start()):
            add("packages", match.group(1))


_STEPS: _Steps = (
    (_FILE_EXTENSION, _files),
    (_URL, _urls),
    *((pattern, _first_group("functions")) for pattern in _FUNCTIONS),
    *((pattern, _first_group("classes")) for pattern in _CLASSES),
    (_ERROR_SUFFIX, _error_names),
    (_ERROR_LITERALS, _error_codes),
    *((pattern, _error_phrases) for pattern in _ERROR_PHRASES),
    *((pattern, _installed) for pattern in _PACKAGE_INSTALLS),
    *((pattern, _python_imports) for pattern in _PY_IMPORTS),
    *((pattern, _first_group("packages")) for pattern in _JS_IMPORTS),
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


def _scan(collector: _Collector, text: str, known: frozenset[str] | None) -> None:
    text = _window(text)
    steps = _active(text) if known is None else _patterns_for(known & _NAMES)
    add = collector.add
    for pattern, extract in steps:
        extract(add, text, pattern)


def extract_entities(*values: Any, scanned: Scanned | None = None) -> dict[str, list[str]]:
    """Entities found in the given JSON values (tool arguments, results), by kind.

    `scanned`: what `SANITIZE_SCANNER` found in the values' strings while sanitizing them
    (`sanitize_json(scanner=SANITIZE_SCANNER, scanned=...)`); the others are scanned here.
    """
    collector = _Collector()
    for value in values:
        for key, text in _strings(value):
            if key in FILE_KEYS and "\n" not in text and len(text) < 1024:
                collector.add("files", text)
            elif key in COMMAND_KEYS and len(text) < 4096:
                collector.add("commands", text.split("\n", 1)[0])
            elif key in URL_KEYS and text.startswith(("http://", "https://")):
                collector.add("urls", text)
            entry = scanned.get(id(text)) if scanned else None
            # The identity test: an id is only unique while its string lives.
            _scan(collector, text, entry[1] if entry is not None and entry[0] is text else None)
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
