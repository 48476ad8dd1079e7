"""Build the memory block an agent gets before its next turn, fitted to a token budget.

What goes in, by priority: the latest session in full, the search hits most relevant to the
prompt, the project's `project.*` and `current.*` facts, the session before in full, the other
hits, then older sessions one line each until the budget runs out; the oldest are omitted
(the Commander design's multi-level compression). The same text never appears twice. A hit
needs some evidence that it is about the prompt (see `min_similarity`): a block is injected
into every turn, and an unrelated prompt ("thanks", "write a haiku") should cost no tokens of
nearest-neighbour noise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.context import format as fmt
from app.context.queries import sessions_and_facts
from app.llm.embeddings import Embedder
from app.search.schemas import SearchRequest, SearchResult
from app.search.service import SearchTuning, embed_search_query, search
from app.tokens import estimate_tokens, truncate_to_tokens

log = structlog.get_logger(__name__)

FULL_SESSIONS = 2  # the latest sessions shown with their whole summary
RELEVANT_LIMIT = 8
# When copies of one text fill the first page of hits, it is asked for once more this big: the
# same file read in ten sessions, or copied into forty memory files, left the block with one
# item where distinct, relevant texts ranked just below.
RELEVANT_CANDIDATES = 64
RELEVANT_FIRST = 3  # hits that outrank the facts and the second session
MAX_ITEM_TOKENS = 160  # one hit never crowds out the others
MAX_FACTS = 50
NEAR_DUPLICATE = 0.8  # word-set Jaccard at or above which two texts count as the same
_WORDS = re.compile(r"[^\W_]+")


@dataclass(slots=True)
class ContextItem:
    """One part of the block and where it came from."""

    source: str
    content: str
    tokens: int
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    session_id: str | None = None
    observation_id: str | None = None
    created_at: datetime | None = None
    section: str = "relevant"
    rendered: str = ""


@dataclass(slots=True)
class ContextBlock:
    markdown: str
    token_count: int
    budget: int
    items: list[ContextItem] = field(default_factory=list)


class _Fitter:
    """Accepts parts while they fit; a section's heading is paid for by its first part."""

    def __init__(self, budget: int) -> None:
        self.remaining = budget - estimate_tokens(fmt.HEADER) - estimate_tokens(fmt.FOOTER)
        self.items: list[ContextItem] = []
        self.sections: set[str] = set()
        self.seen: list[set[str]] = []

    def cost(self, section: str, rendered: str) -> int:
        heading = fmt.SECTION_HEADINGS[section] if section not in self.sections else ""
        return estimate_tokens(heading) + estimate_tokens(rendered)

    def room(self, section: str) -> int:
        heading = fmt.SECTION_HEADINGS[section] if section not in self.sections else ""
        return self.remaining - estimate_tokens(heading)

    def duplicate(self, words: set[str]) -> bool:
        return _near_any(words, self.seen)

    def add(self, item: ContextItem, rendered: str, words: set[str] | None = None) -> bool:
        """Add `item` if it fits; `words` are those of the text it was cut from, if it was cut
        (a hit's, already found for its duplicate check)."""
        cost = self.cost(item.section, rendered)
        if cost > self.remaining:
            return False
        self.remaining -= cost
        self.sections.add(item.section)
        item.rendered = rendered
        item.tokens = estimate_tokens(rendered)
        self.items.append(item)
        # Later texts are compared with the whole, not the cut: a 400-token section cut to its
        # 160-token share shared under half of its words with the cut, and its copy in another
        # file went in too.
        self.seen.append(words if words is not None else _words(item.content))
        return True


def _words(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower()))


def _near_any(words: set[str], others: list[set[str]]) -> bool:
    """Whether a text of `words` has none, or overlaps one of `others` by `NEAR_DUPLICATE`+."""
    if not words:
        return True
    return any(len(words & other) / len(words | other) >= NEAR_DUPLICATE for other in others)


def _session_item(row: Any, section: str, content: str) -> ContextItem:
    return ContextItem(
        source="summary",
        content=content,
        tokens=0,
        session_id=row.ref,
        created_at=row.at,
        section=section,
    )


def _add_session(fitter: _Fitter, row: Any, *, full: bool) -> None:
    if full:
        rendered = fmt.session_full(row.at, row.title, row.body)
        if fitter.add(_session_item(row, "session", row.body.strip()), rendered):
            return
        shell = fmt.session_full(row.at, row.title, "")
        room = fitter.room("session") - estimate_tokens(shell) - 1
        while room >= 40:
            summary = truncate_to_tokens(row.body.strip(), room)
            rendered = fmt.session_full(row.at, row.title, summary)
            # The fence closing a summary cut inside code is paid for too.
            over = fitter.cost("session", rendered) - fitter.remaining
            if over <= 0:
                fitter.add(_session_item(row, "session", summary), rendered, _words(row.body))
                return
            room -= over
    line = fmt.session_line(row.at, row.title, row.body)
    fitter.add(_session_item(row, "older", line.strip()), line)


def _add_hit(fitter: _Fitter, hit: SearchResult) -> None:
    words = _words(hit.content)
    if fitter.duplicate(words):
        return
    cite = fmt.citation(hit)
    shell = estimate_tokens(fmt.relevant_item(cite, hit.source, ""))
    allowed = min(MAX_ITEM_TOKENS + shell, fitter.room("relevant"))
    room = allowed - shell - 1
    text = fmt.item_lines(hit.content)
    while True:
        if room < 20:
            return
        content = truncate_to_tokens(text, room)
        rendered = fmt.relevant_item(cite, hit.source, content)
        # The indentation of its lines and the closing of a cut fence are paid for too.
        over = estimate_tokens(rendered) - allowed
        if over <= 0:
            break
        room -= over
    item = ContextItem(
        source=hit.source,
        content=content,
        tokens=0,
        path=hit.path,
        start_line=hit.start_line,
        end_line=hit.end_line,
        session_id=hit.session_id,
        observation_id=hit.observation_id,
        created_at=hit.created_at,
        section="relevant",
    )
    fitter.add(item, rendered, words)


def _distinct(results: list[SearchResult]) -> list[SearchResult]:
    """`results` without the near-copies of a better-ranked one, best first."""
    kept: list[SearchResult] = []
    seen: list[set[str]] = []
    for hit in results:
        words = _words(hit.content)
        if not _near_any(words, seen):
            kept.append(hit)
            seen.append(words)
    return kept


async def _relevant(
    session: AsyncSession,
    *,
    prompt: str,
    project_path: str,
    embedder: Embedder,
    tuning: SearchTuning,
) -> list[SearchResult]:
    """Up to `RELEVANT_LIMIT` distinct hits for `prompt`, best first."""
    # The first 4,000 characters of the words: of the raw prompt, blanks before them (pasted
    # indentation) left the search an empty query, a 400 for a context request.
    request = SearchRequest(query=prompt.strip()[:4000], project_path=project_path)
    # Embedded once for both pages: a Gemini embedder bills each call and caches none.
    embedding = await embed_search_query(embedder, request)

    async def page(limit: int) -> list[SearchResult]:
        response = await search(
            session,
            request=request.model_copy(update={"limit": limit}),
            embedder=embedder,
            tuning=tuning,
            snippets=False,  # the block quotes `content`; highlighting would be thrown away
            embedding=embedding,
        )
        return response.results

    results = await page(RELEVANT_LIMIT)
    found = _distinct(results)
    # A short first page is all there is; a full one thinned by copies may hide more below.
    # Asked for only then, so an ordinary prompt costs one search as before.
    if len(found) < RELEVANT_LIMIT and len(results) == RELEVANT_LIMIT:
        found = _distinct(await page(RELEVANT_CANDIDATES))
    return found[:RELEVANT_LIMIT]


def _render(fitter: _Fitter) -> str:
    if not fitter.items:
        return fmt.HEADER + fmt.EMPTY + fmt.FOOTER
    parts = [fmt.HEADER]
    for section in fmt.SECTION_ORDER:
        members = [item for item in fitter.items if item.section == section]
        if members:
            recent = section == "older" and "session" not in fitter.sections
            parts.append(fmt.RECENT_HEADING if recent else fmt.SECTION_HEADINGS[section])
            parts.extend(item.rendered for item in members)
    parts.append(fmt.FOOTER)
    return "".join(parts)


async def build_context(
    session: AsyncSession,
    *,
    project_path: str,
    prompt: str | None,
    budget: int,
    embedder: Embedder,
    tuning: SearchTuning | None = None,
    max_sessions: int = 5,
    min_similarity: float | None = None,
) -> ContextBlock:
    """The project's memory block for `prompt`, never over `budget` tokens.

    A search hit goes in only when its cosine similarity to the prompt is at least
    `min_similarity` or it holds two or more of the prompt's words (None: every hit may)."""
    rows = await sessions_and_facts(
        session, project_path=project_path, sessions=max_sessions, facts=MAX_FACTS
    )
    sessions = [row for row in rows if row.kind == "session"]
    facts = [row for row in rows if row.kind == "kv"]
    hits: list[SearchResult] = []
    twins: list[SearchResult] = []  # facts' own index rows
    if prompt and prompt.strip():
        found = await _relevant(
            session,
            prompt=prompt,
            project_path=project_path,
            embedder=embedder,
            tuning=replace(tuning or SearchTuning(), min_similarity=min_similarity),
        )
        # Only the sessions shown in full: an older one gets a line holding its task alone, so
        # its summary, when it is what the prompt is about, goes in as a hit (and the line goes).
        shown_in_full = {row.ref for row in sessions[:FULL_SESSIONS]}
        # A fact's own index row (`key: value`) would repeat it: a top hit is placed before the
        # facts, so the de-duplication of parts as they are added kept both. Held back, it comes
        # in after the facts if its fact did not fit (a fact goes in whole, a hit may be cut).
        fact_words = [_words(f"{fact.title} {fact.body}") for fact in facts]
        hits = []
        for hit in found:
            if hit.source == "summary" and hit.session_id in shown_in_full:
                continue
            if hit.source == "kv" and _near_any(_words(hit.content), fact_words):
                twins.append(hit)
            else:
                hits.append(hit)

    fitter = _Fitter(budget)
    for index, row in enumerate(sessions[:1]):
        _add_session(fitter, row, full=index < FULL_SESSIONS)
    for hit in hits[:RELEVANT_FIRST]:
        _add_hit(fitter, hit)
    for fact in facts:
        value = fmt.fact_value(fact.body)
        item = ContextItem(
            source="kv",
            content=f"{fact.title}: {value}",
            tokens=0,
            created_at=fact.at,
            section="facts",
        )
        fitter.add(item, fmt.fact_line(fact.title, value))
    shown_facts = [_words(item.content) for item in fitter.items if item.section == "facts"]
    for hit in twins:
        if not _near_any(_words(hit.content), shown_facts):
            _add_hit(fitter, hit)
    for row in sessions[1:FULL_SESSIONS]:
        # Not in full after a latest session that got one line: it would be shown above it.
        _add_session(fitter, row, full="session" in fitter.sections)
    for hit in hits[RELEVANT_FIRST:]:
        _add_hit(fitter, hit)
    quoted = {item.session_id for item in fitter.items if item.source == "summary"}
    for row in sessions[FULL_SESSIONS:]:
        if row.ref not in quoted:
            _add_session(fitter, row, full=False)

    markdown = _render(fitter)
    tokens = estimate_tokens(markdown)
    shown = sorted(fitter.items, key=lambda item: fmt.SECTION_ORDER.index(item.section))
    log.debug(
        "context.built", project=project_path, tokens=tokens, budget=budget, items=len(fitter.items)
    )
    return ContextBlock(markdown=markdown, token_count=tokens, budget=budget, items=shown)
