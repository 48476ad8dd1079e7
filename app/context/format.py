"""The context block's markdown, one function per part, so the builder can price each part.

Every part is rendered exactly as it will appear; the block is their concatenation in display
order. Layout follows the original design: `<memory>`, `# Antigravity Memory: Previous Sessions`,
one `## Session from <date>` per recent session with its `**Task**`, then the rest.
"""

from __future__ import annotations

import re
from datetime import datetime

from app import exactjson
from app.search.schemas import SearchResult

HEADER = "<memory>\n# Antigravity Memory: Previous Sessions\n"
FOOTER = "</memory>\n"
EMPTY = "\nNo previous context for this project yet.\n"

SECTION_ORDER = ("session", "older", "facts", "relevant")
SECTION_HEADINGS = {
    "session": "",
    "older": "\n## Earlier sessions\n",
    "facts": "\n## Project memory\n",
    "relevant": "\n## Relevant memory\n",
}
# The one-line sessions' heading when no session is shown in full (a tiny budget): "Earlier"
# listed the latest session as an earlier one. No longer than the heading it replaces, so the
# price the builder paid for that one still holds.
RECENT_HEADING = "\n## Recent sessions\n"

_SPACE = re.compile(r"\s+")
# A `<memory>` or `</memory>` tag in a quoted text (a doc about the hook, a transcript, a tool
# result) would end the block early: whoever strips our block from an echoed prompt (the proxy,
# capture) removes up to the first `</memory>` and keeps the rest. Quoted tags lose their `<`.
_TAG = re.compile(r"<(/?(?i:memory))(?=[\s/>]|$)")


def inert(text: str) -> str:
    """`text` with its `<memory>` / `</memory>` tags written `&lt;memory>`, so none is a tag."""
    return _TAG.sub(r"&lt;\1", text) if "<" in text else text


def one_line(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def date_label(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC") if at.tzinfo else at.strftime("%Y-%m-%d %H:%M")


def quotes_task(summary: str, task: str) -> bool:
    """Whether `summary` quotes `task` whole (`"<task>"`) or cut (`"<its start>…"`).

    The offline summary opens with its task quoted (`on "<task>"`, cut at 40 tokens): a
    `**Task**` line above it said it again, 136 tokens of a 2,000-token block over the
    testdata's two latest sessions. A quote that merely begins like the task (`"tests/…"` for
    the task `test`) is not it."""
    if not task:
        return False
    if f'"{task}"' in summary:
        return True
    opening = f'"{task[:16]}'
    at = summary.find(opening)
    while at >= 0:
        end = summary.find('…"', at)
        if end < 0:
            return False
        if task.startswith(summary[at + 1 : end]):
            return True
        at = summary.find(opening, at + 1)
    return False


def session_full(at: datetime, task: str | None, summary: str) -> str:
    task = one_line(task) if task else ""
    task_line = f"**Task**: {task}\n\n" if task and not quotes_task(summary, task) else ""
    # A summary may hold code (Gemini's do), and one cut to the budget may stop inside it: the
    # open fence turned the rest of the block, `</memory>` included, into code.
    body = balanced(summary.strip())
    return inert(f"\n## Session from {date_label(at)}\n{task_line}{body}\n")


def session_line(at: datetime, task: str | None, summary: str) -> str:
    headline = one_line(task) if task and task.strip() else one_line(summary)
    return inert(f"- {at.strftime('%Y-%m-%d')}: {headline}\n")


def fact_value(raw_json: str) -> str:
    """A kv value as text: strings bare, anything else as compact JSON."""
    # Its numbers as stored (`1.50`, an integer of 5,000 digits, on which `json.loads` raised).
    try:
        value = exactjson.loads(raw_json)
    except RecursionError:
        # Nested past the parser (stored by SQL or an older build): its text as Postgres wrote it.
        return one_line(raw_json)
    if isinstance(value, str):
        return one_line(value)
    return exactjson.dumps(value, ensure_ascii=False, separators=(",", ":"))


def fact_line(key: str, value: str) -> str:
    # A key may hold line breaks (only `*` is refused): written raw, its lines stood at the
    # margin as the block's own sections.
    return inert(f"- **{one_line(key)}**: {value}\n")


def citation(hit: SearchResult) -> str:
    """Where a hit came from: `path#Lstart-Lend` for files, `kv:<key>` for a key/value memory,
    the owning row otherwise."""
    if hit.path:
        # A file's name may hold a line break: its lines stood at the margin as the block's own
        # sections (a heading, a fake fact).
        path = one_line(hit.path)
        if hit.start_line is not None and hit.end_line is not None:
            return f"{path}#L{hit.start_line}-L{hit.end_line}"
        return path
    if hit.observation_id:
        return f"observation:{hit.observation_id}"
    if hit.session_id:
        return f"session:{hit.session_id}"
    if hit.key:
        return f"kv:{one_line(hit.key)}"
    return hit.source


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
_BLANK_RUNS = re.compile(r"\n{3,}")


def item_lines(text: str) -> str:
    """`text` with its lines kept (code and tree diagrams stay readable), trailing spaces and
    runs of blank lines dropped: what a hit quotes before it is cut to its share of the budget."""
    # A lone CR (a captured shell output's progress lines) ends a line in markdown too: kept,
    # the lines after it stood at the margin, outside the item, unseen by `balanced`.
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in text.strip().split("\n")]
    # A chunk cut from a file can start with the fence that closes a code block above it (sync
    # cuts after a block's code): read as an opener, it turned the prose after it into code
    # and the code after that into prose. A bare fence followed by a blank line is that (an
    # opening fence is followed by its code).
    if lines[0].strip() in ("```", "~~~") and (len(lines) == 1 or not lines[1]):
        lines = lines[1:]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines).strip())


def balanced(text: str) -> str:
    """`text` with what a cut left open closed: a code fence, then inline code, then bold.

    An item is quoted inside the block; an open fence swallowed everything after it (later
    items, `</memory>` included), and a stray backtick or `**` ran into the next item."""
    lines = text.split("\n")
    fence = ""
    last_prose = -1
    prose: list[str] = []  # the lines outside code blocks: `**kwargs` in code is no bold
    for index, line in enumerate(lines):
        match = _FENCE.match(line)
        if match is None:
            if not fence:
                last_prose = index
                prose.append(line)
            continue
        marker = match.group(1)
        if not fence and marker[0] == "`" and "`" in line[match.end() :]:
            # Inline code (a backtick fence's info string holds no backtick): "```make```".
            last_prose = index
            prose.append(line)
            continue
        if not fence:
            fence = marker
        elif (
            marker[0] == fence[0] and len(marker) >= len(fence) and not line[match.end() :].strip()
        ):
            fence = ""
    if last_prose >= 0:
        lines[last_prose] += _inline_closers("\n".join(prose))
    if fence:
        lines.append(fence)
    return "\n".join(lines)


def _inline_closers(prose: str) -> str:
    spans_removed = _CODE_SPAN.sub("", prose)
    tick = spans_removed.find("`")
    outside = spans_removed if tick < 0 else spans_removed[:tick]
    closers = (
        ""
        if tick < 0
        else "`" * (len(spans_removed[tick:]) - len(spans_removed[tick:].lstrip("`")))
    )
    if outside.count("**") % 2:
        closers += "**"
    return closers


def relevant_item(cite: str, source: str, content: str) -> str:
    """A hit as a list item: short text on the item's line, longer text as its indented lines."""
    head = f"- `{cite}` ({source}):"
    closed = balanced(content)
    # Balanced first: a one-line item its closing fence makes two lines is indented too, or the
    # fence at the margin, outside the list, opened a code block to the end of the block.
    if "\n" not in closed:
        return inert(f"{head} {closed}\n")
    body = "\n".join(f"  {line}" if line else "" for line in closed.split("\n"))
    return inert(f"{head}\n{body}\n")
