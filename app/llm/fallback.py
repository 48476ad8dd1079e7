"""Deterministic, extractive compression and summaries: no model, no network, same input gives
the same text. Used when no GEMINI_API_KEY is set, when Gemini keeps failing, when the daily
budget is spent, for tools on the skip list, and for small calls whose extract loses no line;
`raw_text` is how the other small calls are kept whole."""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.privacy import ELISION_MARKER, ELISION_START
from app.tokens import estimate_tokens, truncate_to_tokens

EXTRACTIVE = "extractive"
# What a call shows when no result was recorded for it (the worker gave up waiting, or it was
# compressed early): not `(empty)`, which says an empty result did arrive, nor `none`, a JSON
# null that did.
NO_RESULT = "(none recorded)"

_PATH_KEY = re.compile(r"path|file|dir|target|uri", re.IGNORECASE)
_ERROR_LINE = re.compile(
    r"\b(error|exception|traceback|failed|failure|fatal|panic|denied|not found|cannot)\b"
    r"|<tool_use_error>",  # Claude Code's failed tool calls
    re.IGNORECASE,
)
_OLD_KEYS = ("old_string", "oldString", "old_str", "TargetContent", "old")
_NEW_KEYS = (
    "new_string",
    "newString",
    "new_str",
    "ReplacementContent",
    "content",
    "CodeContent",
    "contents",
    "new",
)
# A line shown is cut at this many tokens (the app's estimate): 160 characters of code, ~40
# ideographs. At 160 characters a line of Chinese was shown at up to four times the budget.
MAX_LINE_TOKENS = 40
# Between two arguments: ` | ` read as a shell pipe after a command (`Bash ls | head | List
# files`). A middle dot is no shell operator and costs what ` | ` cost (one narrow character).
ARG_SEPARATOR = " · "


def strings_in(value: Any) -> Iterator[str]:
    """Every string leaf of a JSON value, depth first, in document order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def target_files(args: Any) -> list[str]:
    """Paths named by the call's arguments (keys that say path/file/dir/target), in order."""
    found: list[str] = []

    def visit(value: Any, key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, str(k))
        elif isinstance(value, list):
            for v in value:
                visit(v, key)
        elif isinstance(value, str) and _PATH_KEY.search(key) and value and "\n" not in value:
            if len(value) <= 300 and value not in found:
                found.append(value)

    visit(args, "")
    return found


def _short(line: str) -> str:
    return truncate_to_tokens(" ".join(line.split()), MAX_LINE_TOKENS)


def _lines(result: Any) -> list[str]:
    lines = [ln for s in strings_in(result) for ln in s.splitlines() if ln.strip()]
    if not lines and result is not None and not isinstance(result, str) and not _blank(result):
        # Numbers and flags only (`{"stdout": "", "exitCode": 1}`): the structure is the result.
        lines = [json.dumps(result, ensure_ascii=False, sort_keys=True)]
    return lines


def _blank(value: Any) -> bool:
    """Whether a result holds nothing but blank text (Gemini CLI's `{"output": ""}`)."""
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, dict):
        return all(_blank(item) for item in value.values())
    if isinstance(value, list):
        return all(_blank(item) for item in value)
    return False


def _error_line(line: str) -> str:
    """An error line, or its first sentence when the whole would be cut: the error, not the
    advice after it (`… but replace_all is false. To replace all occurrences, set …`), where
    the cut at MAX_LINE_TOKENS stopped mid-word in the advice. A short line keeps its hint."""
    whole = " ".join(line.split())
    if estimate_tokens(whole) <= MAX_LINE_TOKENS:
        return whole
    return _short(_first_sentence(whole))


def key_lines(result: Any, *, limit: int = 3) -> tuple[list[str], list[str]]:
    """(error lines, first meaningful lines) of a tool result, each shortened to one line."""
    lines = _lines(result)
    errors = [_error_line(ln) for ln in [ln for ln in lines if _ERROR_LINE.search(ln)][:limit]]
    firsts = [_short(ln) for ln in [ln for ln in lines if not _ERROR_LINE.search(ln)][:limit]]
    return errors, firsts


# A read's content, line by line: a numbered line (`   228→func f() {`, `12:`, a tab) loses its
# number; definitions, headings and sections outline the file far better than its first lines,
# which are mostly imports.
_LINE_NUMBER = re.compile(r"^\s*(\d+)(?:→|\t|: )")
_HEADING = re.compile(r"^#{1,3} \S")  # in Markdown; elsewhere `#` starts a comment
_MARKDOWN = (".md", ".mdx", ".markdown")
_WORDY = re.compile(r"\w{3}")
_OUTLINE = re.compile(
    r"^(?:\[[\w.\- ]+\]\s*$"
    r"|(?:(?:export|pub(?:\([\w ]+\))?|public|private|protected|static|async|default|abstract)\s+)*"
    r"(?:def|class|func|function|fn|interface|struct|enum|trait|impl|type|module)\s+[\w(*]"
    r")"
)
STATUS_LINES = 2  # a failed read or write says so at once; what follows is the file's content
# How a read or write that failed says so on its first lines; a file's own lines (`class
# ParseError(Exception):`, a docstring saying `cannot`) hold error words too, so the word
# alone made a read of source code an error, its outline dropped. Besides a line opening with
# an error word: an exception's name (`PermissionError: [Errno 13] …`), a traceback, and a
# few plain words before a failure word (`Edit failed: …`, `The system cannot find the file
# specified.`, `Access is denied.`); the words start the line, so a numbered or indented line
# of a file (`1\tclass ParseError`, `    """… parsing failed …"""`) is not one.
_FAILURE_STATUS = re.compile(
    r"^\s*(?:<tool_use_error>"
    r"|(?:error|fatal|failed|failure)\b"
    r"|(?:cannot|could not|unable to|permission denied|access denied|no such file"
    r"|file not found|file does not exist|not found)\b"
    r"|E[A-Z]{3,}:"  # errno names (ENOENT:, EACCES:)
    r"|[\w.]*(?:Error|Exception):"
    r"|Traceback \(most recent call last\):)"
    r"|^[A-Za-z][\w ]{0,40}?\b(?:failed|cannot|could not|unable to|denied|not found"
    r"|does not exist|no such file)\b",
    re.IGNORECASE,
)


def read_outline(result: Any, *, markdown: bool = False, limit: int = 3) -> str | None:
    """`lines 225-254 | func f(...) | ...` (or `412 lines | # Title | ...`) for a file read:
    its definitions, sections or (Markdown) headings, else its first line with a word."""
    lines = _lines(result)
    if not lines:
        return None
    numbers: list[int] = []
    stripped: list[str] = []
    headings: list[str] = []
    fenced = False
    for line in lines:
        match = _LINE_NUMBER.match(line)
        if match:
            numbers.append(int(match.group(1)))
            line = line[match.end() :]
        line = line.strip()
        if line.startswith("```"):
            fenced = not fenced  # a `# comment` in a Markdown code block is no heading
        elif line:
            stripped.append(line)
            if _OUTLINE.match(line) or (markdown and not fenced and _HEADING.match(line)):
                headings.append(line)
    wordy = [ln for ln in stripped if _WORDY.search(ln) and not ln.startswith(ELISION_START)]
    outline = headings[:limit] or wordy[:1]
    if len(numbers) >= 2:
        span = f"lines {numbers[0]}-{numbers[-1]}"
    else:
        span = _line_count(result, lines)
    return " | ".join([span, *map(_short, outline)])


def failure_lines(result: Any, *, limit: int = 3) -> list[str]:
    """What a read's or write's result says of its failure: the text under an `error` key
    (Gemini CLI's failed call) and a first line stating one; not the file's content."""
    keyed = strings_in(result.get("error")) if isinstance(result, dict) else iter(())
    lines = [ln for s in keyed for ln in s.splitlines() if ln.strip()]
    lines += [ln for ln in _lines(result)[:STATUS_LINES] if _FAILURE_STATUS.match(ln)]
    return [_error_line(ln) for ln in dict.fromkeys(lines)][:limit]


def _line_count(result: Any, lines: list[str]) -> str:
    """`412 lines`, or for a result capture cut to its head and tail (`cap_text`), the lines
    kept and the size of the whole: `2715 lines shown of 1,048,572 chars`. The kept lines were
    counted as the file's, and a 174,762-line log read as `2716 lines`."""
    strings = list(strings_in(result))
    count = sum(len(ELISION_MARKER.sub("\n", s).splitlines()) for s in strings) or len(lines)
    cuts = [int(m.group(1)) for s in strings for m in ELISION_MARKER.finditer(s)]
    if cuts:
        return f"{count} lines shown of {sum(cuts):,} chars"
    return f"{count} line{'' if count == 1 else 's'}"


def _first_sentence(line: str) -> str:
    cut = line.find(". ")
    return line[: cut + 1] if cut > 0 else line


# A write's reply that only says it worked, echoing the file the call named (`The file cmd/x.go
# has been updated successfully.`, `Successfully modified file: /…/GEMINI.md (1 replacements).`):
# its verb says how, and the file is on the first line already (a path the call did not name
# is kept). Any other reply (a refusal, a permission prompt, a success that says more) is kept
# as its first sentence.
_SUCCESS = re.compile(r"\bsuccess(?:ful|fully)?\b", re.IGNORECASE)
_CHANGE = re.compile(
    r"\b(created|overwrote|overwritten|updated|modified|wrote|written|replaced|edited|saved"
    r"|deleted|removed|moved|renamed|appended)\b",
    re.IGNORECASE,
)
_PATHISH = re.compile(r"[^\s:,;()'\"`]*[/.][^\s:,;()'\"`]*\w")
_WORD = re.compile(r"[^\W\d_]+")
MAX_STATUS_WORDS = 8


def write_status(line: str, *, files: Sequence[str], root: str | None) -> tuple[str, bool]:
    """(what an extract shows of a write's first result line, whether that is a summary): the
    verb of a plain success (`updated`) and any path it names that `files` do not, else the
    line's first sentence."""
    sentence = _first_sentence(_short(line))
    rest = _PATHISH.sub(" ", sentence)
    if (
        not _SUCCESS.search(rest)
        or _ERROR_LINE.search(rest)
        or len(_WORD.findall(rest)) > MAX_STATUS_WORDS
    ):
        return sentence, False
    change = _CHANGE.search(rest)
    named = {_relative(f, root) for f in files}
    paths = [p for p in _PATHISH.findall(sentence) if _relative(p, root) not in named]
    return " ".join([change.group(1).lower() if change else "ok", *dict.fromkeys(paths)]), True


def _first_key(args: Any, keys: Sequence[str]) -> str | None:
    if not isinstance(args, dict):
        return None
    for key in keys:
        value = args.get(key)
        if isinstance(value, str):
            return value
    return None


SMALL_DIFF = 4  # changed lines up to which an edit (or a new file) shows them, not only a count
# A changed line or to-do item is cut at this many tokens (the app's estimate: 80 characters of
# code, ~20 ideographs), so a line of Chinese is not shown at four times the budget of English.
MAX_CHANGE_TOKENS = 20


def diff_summary(args: Any) -> str | None:
    """`+added/-removed lines` for a write or edit, from its old and new text arguments; the
    changed lines themselves (`-old | +new`) when there are at most SMALL_DIFF."""
    new = _first_key(args, _NEW_KEYS)
    if new is None:
        return None
    old = _first_key(args, _OLD_KEYS) or ""
    added: list[str] = []
    removed: list[str] = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added.append(line)
        elif line.startswith("-") and not line.startswith("---"):
            removed.append(line)
    summary = f"+{len(added)}/-{len(removed)} lines"
    changed = [ln for ln in removed + added if ln[1:].strip()]
    if changed and len(added) + len(removed) <= SMALL_DIFF:
        shown = " | ".join(
            ln[0] + truncate_to_tokens(_short(ln[1:]), MAX_CHANGE_TOKENS) for ln in changed
        )
        # The lines shown say their count, unless a blank line was added or removed too.
        summary = shown if len(changed) == len(added) + len(removed) else f"{summary}: {shown}"
    return summary


# A to-do list (Claude Code's TodoWrite, Gemini CLI's write_todos) is the agent's plan: its
# items and their states are what to keep, where the first two argument strings were one item.
_TODO_MARKS = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]", "cancelled": "[-]"}
MAX_TODOS = 8


def todo_line(args: Any) -> str | None:
    """`Todos: [x] Analyze the code; [~] Create CLAUDE.md; [ ] Review` for a to-do list call."""
    todos = args.get("todos") if isinstance(args, dict) else None
    if not isinstance(todos, list):
        return None
    items = []
    for todo in todos:
        if not isinstance(todo, dict):
            return None
        text = todo.get("content") or todo.get("description")
        if not isinstance(text, str):
            return None
        mark = _TODO_MARKS.get(str(todo.get("status")), f"[{todo.get('status')}]")
        items.append(f"{mark} {truncate_to_tokens(_short(text), MAX_CHANGE_TOKENS)}")
    if not items:
        return None
    more = f"; and {len(items) - MAX_TODOS} more" if len(items) > MAX_TODOS else ""
    return "Todos: " + "; ".join(items[:MAX_TODOS]) + more


# A reply line that only repeats an argument under a label (`Topic summary: <summary>`,
# `Current topic: "<title>"`): the extract shows the argument once.
_LABEL = re.compile(r"^\w[\w .-]{0,40}:\s*")
_QUOTES = "\"'`“”「」"


def _by_words(values: Iterable[str]) -> dict[str, str]:
    """`values` by their words (spacing aside), for `_echoed`: each squashed once, not per line."""
    return {" ".join(v.split()): v for v in values}


def _echoed(line: str, values: Mapping[str, str]) -> str | None:
    """The argument among `values` (`_by_words`) that `line` repeats under a label, if any."""
    label = _LABEL.match(line)
    if not label:
        return None
    said = " ".join(line[label.end() :].strip().strip(_QUOTES).split())
    return values.get(said) if said else None


# A search's output line by line, grep's way: `path:84:` a match, `path-81-` a line of context
# around it (grep -C, Claude Code's Grep); `--` between groups.
_GREP_LINE = re.compile(r"^(\S+?)([:-])(\d+)\2\s*")


def search_lines(lines: Sequence[str], root: str | None) -> list[str]:
    """A search's result lines: with context, its matches only (what was found), each file
    named once in a row (`a.py:3: x | :9: y`), and a line found again in it by its number only
    (`a.py:84,239: x`)."""
    parsed = [(_GREP_LINE.match(ln), ln) for ln in lines]
    if not any(m and m.group(2) == ":" for m, _ in parsed):
        return list(lines)
    # [file as shown, its line numbers, the matched text], or a line that is no match.
    shown: list[tuple[str, list[str], str] | str] = []
    previous = None
    for match, line in parsed:
        if match is None and _WORDY.search(line):  # not `--`, which only parts groups
            shown.append(line)
            previous = None
        elif match is not None and match.group(2) == ":":
            path = _relative(match.group(1), root)
            text = " ".join(line[match.end() :].split())
            last = shown[-1] if shown else None
            if path == previous and isinstance(last, tuple) and last[2] == text:
                last[1].append(match.group(3))
            else:
                shown.append(("" if path == previous else path, [match.group(3)], text))
            previous = path
    return [s if isinstance(s, str) else f"{s[0]}:{','.join(s[1])}: {s[2]}" for s in shown]


def _relative(text: str, root: str | None) -> str:
    """Paths under the project written relative to it: the project is stored with the row."""
    if not root or len(root.rstrip("/")) < 2:
        return text
    return text.replace(root.rstrip("/") + "/", "")


MAX_MENTIONS = 5
MAX_MENTION_CHARS = 80


def mentions(entities: Mapping[str, Sequence[str]], text: str, root: str | None) -> list[str]:
    """Errors and files capture found in the call that the text does not name yet (URLs and
    their fragments aside), none inside another: what keyword search and the next session can
    still find."""
    found: list[str] = []
    for kind in ("errors", "files"):
        for value in entities.get(kind, ()):
            value = _relative(value, root)
            if (
                value
                and not _names(text, value)
                and not any(_names(f, value) for f in found)
                and len(value) <= MAX_MENTION_CHARS
                and not value.startswith("/")
                and "//" not in value
            ):
                # `cli.py` is named by `src/discordbot/cli.py`, whichever comes first.
                found = [f for f in found if not _names(value, f)] + [value]
    return found[:MAX_MENTIONS]


def _names(text: str, name: str) -> bool:
    """Whether `text` holds `name` whole: `src/cli.py` names `cli.py`, `test_utils.py` does not
    name `utils.py` nor `data.py` name `a.py`, which are other files."""
    if name not in text:  # the common case, without a pattern
        return False
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def compress_extractive(
    *,
    function_name: str,
    observation_type: str,
    args: Any,
    result: Any,
    project_path: str | None = None,
    entities: Mapping[str, Sequence[str]] | None = None,
    result_missing: bool = False,
) -> str:
    """A few structured lines: the call, its files, a diff summary, the other errors and files
    capture found in it (`entities`), the call's errors, key result lines (`Result: (none
    recorded)` when `result_missing`: no result ever came).

    A read keeps its line span and outline; a write its diff and first status sentence; paths
    under `project_path` are written relative to it.
    """
    files = target_files(args)
    # The tool's name without its type: the type has its own column (and the Gemini summary's
    # prompt prints it), and `(code_execution)` cost ~4 tokens an observation. Its files on the
    # same line, `Edit cmd/x.go`, as what was done to what: a `Files:` line cost ~2 tokens more.
    head = function_name
    if files:
        head += " " + ", ".join(files[:5]) + (" …" if len(files) > 5 else "")
    lines = [head]
    diff = diff_summary(args) if observation_type == "file_write" else None
    todos = todo_line(args)
    other_args: list[str] = []
    if diff:
        # An edit's stated purpose (Gemini CLI's `instruction`): why, where the diff says what.
        texts = (_first_key(args, _OLD_KEYS), _first_key(args, _NEW_KEYS))
        said = [s for s in strings_in(args) if s.strip() and s not in files and s not in texts]
        if said:
            lines.append("Args: " + ARG_SEPARATOR.join(_short(s) for s in said[:2]))
        lines.append(f"Diff: {diff}")
    elif todos:
        lines.append(todos)
    else:
        # The other arguments too: a search's pattern matters as much as the folder it searched.
        strings = [s for s in strings_in(args) if s.strip() and s not in files]
        other_args = strings[:2]
        if observation_type not in ("file_read", "file_write"):
            # An argument the reply repeats under a label (`Strategic Intent: <intent>`) is shown
            # with the others, once, where the reply line cost its label and a `Result:` too.
            arguments = _by_words(strings)
            echoed = (_echoed(ln, arguments) for ln in _lines(result))
            other_args += dict.fromkeys(e for e in echoed if e and e not in other_args)
        if other_args and files:
            lines.append("Args: " + ARG_SEPARATOR.join(_short(s) for s in other_args))
        elif other_args:
            # What the call was given, where its files would be: `Glob package.json`.
            lines[0] += " " + ARG_SEPARATOR.join(_short(s) for s in other_args)
    names_at = len(lines)  # Mentions go here, with the names; Result stays the last line
    # A to-do list (typed `other`: it is no file) is written as a file is: its reply is a status.
    writes = observation_type == "file_write" or todos is not None
    if observation_type == "file_read" or writes:
        errors = failure_lines(result)
    else:
        given = _by_words([*files, *other_args])
        replies = [ln for ln in _lines(result) if not _echoed(ln, given)]
        if observation_type == "search":
            replies = search_lines(replies, project_path)
        errors, firsts = key_lines(replies) if replies else ([], [])
    if errors:
        lines.append("Errors: " + " | ".join(errors))
    if observation_type == "file_read":
        markdown = any(f.lower().endswith(_MARKDOWN) for f in files)
        outline = read_outline(result, markdown=markdown)
        firsts = [outline] if outline and not errors else []
    elif writes:
        statuses = [
            write_status(ln, files=files, root=project_path)
            for ln in _lines(result)[:1]
            if not errors
        ]
        # A to-do list's plain success (`Todos have been modified successfully.`) says nothing
        # its items do not: the list is the call, and a refusal is kept.
        firsts = [shown for shown, summary in statuses if not (todos and summary)]
    if result_missing:
        lines.append(f"Result: {NO_RESULT}")
    elif firsts:
        lines.append("Result: " + " | ".join(firsts))
    elif result is None:
        lines.append("Result: none")
    elif not errors and not _lines(result):
        # A `find` that printed nothing found nothing: without this line it did not say so.
        lines.append("Result: (empty)")
    lines = [_relative(line, project_path) for line in lines]
    named = mentions(entities or {}, "\n".join(lines), project_path)
    if named:
        lines.insert(names_at, "Mentions: " + ", ".join(named))
    return "\n".join(lines)


def _argument_strings(args: Any) -> Iterator[str]:
    """The strings of a call's arguments an extract must hold; of a to-do list, its items'
    text: their state is the mark, and Claude Code's `activeForm` restates the text (`Creating
    CLAUDE.md …`) for its UI."""
    if todo_line(args) is None:
        yield from strings_in(args)
        return
    for key, value in args.items():
        if key != "todos":
            yield from strings_in(value)
    for todo in args["todos"]:
        yield todo.get("content") or todo.get("description")


def keeps_every_line(
    text: str, *, observation_type: str, args: Any, result: Any, project_path: str | None
) -> bool:
    """Whether `text` holds every line of the call's argument and result strings (spacing and
    the project's prefix aside), or what stands for it: then only JSON syntax, keys, numbers,
    restated to-do items and a write's plain success reply (shown as its verb, or of a to-do
    list not at all) were left out."""
    squashed = " ".join(text.split())
    lines = [ln for s in _argument_strings(args) for ln in s.splitlines()]
    replies = [ln for s in strings_in(result) for ln in s.splitlines()]
    writes = observation_type == "file_write" or todo_line(args) is not None
    if writes and replies and replies[0].strip():
        shown, summary = write_status(replies[0], files=target_files(args), root=project_path)
        if summary and (
            todo_line(args) is not None or f"Result: {_relative(shown, project_path)}" in squashed
        ):
            replies = replies[1:]
    arguments = _by_words(strings_in(args))
    # A reply line that repeats an argument under a label needs only that argument shown.
    needed = lines + [_echoed(line, arguments) or line for line in replies]
    for line in needed:
        words = " ".join(_relative(line, project_path).split())
        if words and words not in squashed:
            return False
    return True


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def raw_text(*, function_name: str, args: Any, result: Any, result_missing: bool = False) -> str:
    """A small call kept whole, in the extractive text's layout: its arguments and result as
    compact JSON (strings as they are), without the labels and indentation sent to Gemini."""
    lines = [function_name]
    if args not in (None, "", {}, []):
        lines.append("Args: " + _compact(args))
    if result_missing:
        return "\n".join([*lines, f"Result: {NO_RESULT}"])
    if isinstance(result, dict) and len(result) == 1:
        # Gemini's functionResponse.response: `{"output": "…"}`, shown as `output: …`.
        ((key, value),) = result.items()
        if isinstance(value, str):
            result = f"{key}: {value}" if value.strip() else ""
    if result == "":
        result = "(empty)"
    lines.append("Result: " + ("none" if result is None else _compact(result)))
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ObservationDigest:
    """What a session summary needs from one observation."""

    function_name: str
    observation_type: str
    status: str
    compressed: str | None
    files: list[str]
    result_missing: bool = False  # compressed with no result: none ever came


# (one, many): the summary is injected into prompts as prose, so "1 file read", not "1 file reads".
_TYPE_WORDS = {
    "file_read": ("file read", "file reads"),
    "file_write": ("file write", "file writes"),
    "code_execution": ("command", "commands"),
    "search": ("search", "searches"),
    "web": ("web call", "web calls"),
    "other": ("other call", "other calls"),
}


def _count(kind: str, n: int) -> str:
    one, many = _TYPE_WORDS.get(kind, (kind, kind))
    return f"{n} {one if n == 1 else many}"


def _highlight(digest: ObservationDigest) -> tuple[int, str] | None:
    """(rank, line) of an observation for a summary: 0 an error, 1 a write with a file or a
    command, 2 anything else (a read, a search, a to-do list)."""
    if digest.result_missing or not digest.compressed or not digest.compressed.strip():
        return None  # a call without its result has none to quote (the summary names it apart)
    lines = [ln for ln in digest.compressed.splitlines() if ln.strip()]
    # An extract's Errors line, or an error in a raw result's lines (never in a Mentions line,
    # which names `ValueError` wherever a file mentions it).
    result_at = next((i for i, ln in enumerate(lines) if ln.startswith("Result: ")), len(lines))
    errors = [ln for ln in lines if ln.startswith("Errors: ")] or [
        ln for ln in lines[result_at:] if _ERROR_LINE.search(ln)
    ]
    # Trailing punctuation is dropped so that joining results never reads "x;; y.".
    if errors:
        return 0, _short(errors[0]).rstrip(" ;.,")
    changed = digest.observation_type == "code_execution" or (
        digest.observation_type == "file_write" and digest.files
    )
    # The last line that says something: a raw observation kept as indented JSON ends in a lone
    # `}`, and a bracket is no result.
    last = next((ln for ln in reversed(lines) if any(ch.isalnum() for ch in ln)), "")
    if last != lines[0] and (
        last.startswith("Result: ") or (digest.observation_type == "file_write" and digest.files)
    ):
        # A result read alone says neither which call nor what on (`Result: updated`, `Result:
        # lines 1-9`): the first line names the tool and its file or arguments.
        last = f"{lines[0]}: {last.removeprefix('Result: ')}"
    return (1 if changed else 2), _short(last).rstrip(" ;.,")


def notable_results(observations: Sequence[ObservationDigest], *, limit: int = 2) -> list[str]:
    """The session's most telling result lines, in session order: its latest error, its latest
    change (a write to a file, a command), then the rest by kind, latest first."""
    ranked = sorted(
        (h[0], -index, h[1])
        for index, o in enumerate(observations)
        if (h := _highlight(o)) is not None and h[1]
    )
    firsts = [next((r for r in ranked if r[0] == rank), None) for rank in (0, 1)]
    chosen: list[tuple[int, str]] = []
    for _, neg_index, line in [r for r in firsts if r is not None] + ranked:
        if len(chosen) == limit:
            break
        if all(line != c[1] for c in chosen):
            chosen.append((-neg_index, line))
    return [line for _, line in sorted(chosen)]


def summarize_extractive(
    *, project_path: str, user_prompt: str | None, observations: Sequence[ObservationDigest]
) -> str:
    """Three or four sentences built from the session's prompt and its compressed observations."""
    total = len(observations)
    counts = Counter(o.observation_type for o in observations)
    kinds = ", ".join(_count(t, n) for t, n in sorted(counts.items()))
    goal = f' on "{_short(user_prompt)}"' if user_prompt and user_prompt.strip() else ""
    made = f"{total or 'no'} tool call{'' if total == 1 else 's'}"
    sentences = [
        f"This session in {project_path}{goal} made {made}{f' ({kinds})' if kinds else ''}."
    ]
    files: list[str] = []
    for o in observations:
        files.extend(_relative(f, project_path) for f in o.files)
    files = list(dict.fromkeys(files))
    if files:
        more = f" and {len(files) - 6} more" if len(files) > 6 else ""
        sentences.append(f"It touched {', '.join(files[:6])}{more}.")
    highlights = notable_results(observations)
    if highlights:
        sentences.append(f"Notable results: {'; '.join(highlights)}.")
    # The calls the session was cut off in (killed, crashed), or whose result was lost: by their
    # first line, the tool and what it was given.
    unanswered = [
        _short(o.compressed.splitlines()[0])
        for o in observations
        if o.result_missing and o.compressed and o.compressed.strip()
    ]
    if unanswered:
        more = f" and {len(unanswered) - 3} more" if len(unanswered) > 3 else ""
        calls = f"{len(unanswered)} call{'' if len(unanswered) == 1 else 's'}"
        sentences.append(f"{calls} had no result recorded: {'; '.join(unanswered[:3])}{more}.")
    failed = sum(1 for o in observations if o.status == "failed")
    if failed:
        sentences.append(
            f"{failed} observation{'' if failed == 1 else 's'} could not be compressed."
        )
    return " ".join(sentences)
