"""Smart resume: a short briefing and the memories that matter, within a token budget.

The agent reads `briefing`, the last session's summary and each memory as `key: value`; those
texts are what `tokenCount` counts (`app/tokens.py`) and what must fit the budget. The
priority is: briefing, `current.*` (what is in progress), the last summary, `project.*` (stable
facts), then `shared.*` (notes between agents). A memory that does not fit is left out whole.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app import exactjson
from app.config import Settings
from app.db.models import MemoryRow, SessionRow
from app.errors import first_line
from app.llm.gemini import SharedClient
from app.llm.generation import Generation, as_call_failed, generate_text
from app.llm.ratelimit import DailyBudget, GeminiGate, record_rejected, record_usage
from app.memories import service
from app.memories.schemas import LastSession, Resume, ResumeContext
from app.tokens import estimate_tokens, truncate_to_tokens

log = structlog.get_logger(__name__)

NAMESPACES = ("current", "project", "shared")
PER_NAMESPACE = 50
BRIEFING_SHARE = 4  # the briefing may use at most a quarter of the budget
# What of the briefing is kept before a note on left-out memories gets room: `Working on
# Next.js project.` and a little more; the note is shortened or dropped first.
HEAD_TOKENS = 10
# The briefing is waited for by an agent starting work: AGMEM_GEMINI_TIMEOUT_SECONDS, at most 15 s.
BRIEFING_TIMEOUT_SECONDS = 15.0


def value_text(value: Any) -> str:
    return value if isinstance(value, str) else exactjson.dumps(value, ensure_ascii=False)


def memory_tokens(row: MemoryRow) -> int:
    return estimate_tokens(f"{row.key}: {value_text(row.value)}")


@dataclass
class Picked:
    """What fits the budget, by namespace, and the tokens it spends."""

    budget: int
    spent: int = 0
    memories: dict[str, list[MemoryRow]] = field(default_factory=dict)
    summary: SessionRow | None = None
    left_out: list[str] = field(default_factory=list)  # the keys of memories that did not fit

    def take(self, tokens: int) -> bool:
        if self.spent + tokens > self.budget:
            return False
        self.spent += tokens
        return True


async def smart_resume(
    session: AsyncSession,
    *,
    settings: Settings,
    project_path: str | None,
    session_id: str | None,
    budget: int,
    gate: GeminiGate | None = None,
    gemini: SharedClient | None = None,
) -> Resume:
    """Brief an agent on a project: what it is, what is in progress, what comes next.

    `gate` is the process's breaker: after repeated Gemini failures the template answers at
    once for the cooldown, instead of each call waiting for Gemini's timeout. `gemini` is the
    process's client for briefings (`briefing_client`); without it, a one-off closed after."""
    if project_path is None and session_id is not None:
        project_path = await _project_of_session(session, session_id)
    visibility = service.Visibility(project_path=project_path, session_id=session_id)
    candidates = {ns: await _namespace(session, visibility, ns) for ns in NAMESPACES}
    # Read one more than used: whether a namespace holds more than resume looks at.
    unread = [ns for ns in NAMESPACES if len(candidates[ns]) > PER_NAMESPACE]
    candidates = {ns: rows[:PER_NAMESPACE] for ns, rows in candidates.items()}
    last = await _last_summary(session, project_path)

    reserve = max(budget // BRIEFING_SHARE, 1)
    picked = Picked(budget=budget - reserve)
    for namespace in NAMESPACES:
        picked.memories[namespace] = [
            row for row in candidates[namespace] if picked.take(memory_tokens(row))
        ]
        taken = picked.memories[namespace]
        picked.left_out += [row.key for row in candidates[namespace] if row not in taken]
        if namespace == "current" and last is not None and last.summary:
            picked.summary = last if picked.take(estimate_tokens(last.summary)) else None

    briefing, briefed_by = await _briefing(session, settings, project_path, picked, gate, gemini)
    # Else nothing tells the agent they exist (the template said none were stored). Room is
    # made for it before the briefing is cut: added after, a long briefing's cut took it away.
    room = max(budget - picked.spent, 0)
    briefing = _fit_briefing(briefing, picked.left_out, unread, room)
    kept = [row.id for rows in picked.memories.values() for row in rows]
    await service.count_access_of(session, memory_ids=kept)
    token_count = picked.spent + estimate_tokens(briefing)
    log.info("memory.resume", project=project_path, tokens=token_count, budget=budget)
    return Resume(
        briefing=briefing,
        briefing_by=briefed_by,
        context=ResumeContext(
            **{ns: [service.to_schema(row) for row in picked.memories[ns]] for ns in NAMESPACES}
        ),
        last_session=(
            LastSession(
                id=picked.summary.id,
                summary=picked.summary.summary or "",
                summarized_at=picked.summary.summarized_at,
            )
            if picked.summary is not None
            else None
        ),
        token_count=token_count,
        budget=budget,
    )


def _fit_briefing(briefing: str, left_out: list[str], unread: list[str], room: int) -> str:
    """The briefing and its note on what it does not hold, within `room` tokens.

    The note gets room before the briefing is cut (added after, a long briefing's cut took it
    away), but not all of it: at budget 50 the briefing was cut to `Wor…` beside a note cut
    inside its key list. The briefing keeps `HEAD_TOKENS` (or all of it, if shorter), and the
    note is the first of its forms that fits beside that: whole, without its keys, or none."""
    # Cut with the app's estimate: at four characters a token, a briefing quoting a Chinese
    # task answered 691 tokens for a budget of 500.
    head_needs = min(estimate_tokens(briefing), HEAD_TOKENS)
    for note in (_left_out_note(left_out, unread), _left_out_note(left_out, unread, keys=False)):
        if not note:
            break
        head_room = room - estimate_tokens(note) - 1
        if head_room >= head_needs:
            return f"{truncate_to_tokens(briefing, head_room)} {note}".strip()
    return truncate_to_tokens(briefing, room)


def _left_out_note(left_out: list[str], unread: list[str], *, keys: bool = True) -> str:
    """What the briefing says of the memories it does not hold: those the budget left out (by
    key, unless `keys` is false), and the namespaces holding more than resume reads."""
    parts = []
    if left_out:
        count = len(left_out)
        said = f"{count} memor{'y' if count == 1 else 'ies'} left out"
        parts.append(f"{said} for the budget: {', '.join(left_out)}." if keys else f"{said}.")
    if unread:
        spaces = ", ".join(f"{namespace}.*" for namespace in unread)
        more = f" than the {PER_NAMESPACE} read here" if keys else ""
        parts.append(f"More memories under {spaces}{more}.")
    return " ".join(parts)


async def _namespace(
    session: AsyncSession, visibility: service.Visibility, namespace: str
) -> list[MemoryRow]:
    """Visible `namespace.*` memories, one per key (the most specific scope wins), up to one
    more than `PER_NAMESPACE`."""
    rows = await service.find_memories(
        session,
        visibility=visibility,
        pattern=f"{namespace}.*",
        limit=PER_NAMESPACE + 1,
        count_access=False,
    )
    unique: dict[str, MemoryRow] = {}
    for row in rows:  # sorted by key, most specific first
        unique.setdefault(row.key, row)
    return list(unique.values())


async def _project_of_session(session: AsyncSession, session_id: str) -> str | None:
    statement = select(SessionRow.project_path).where(SessionRow.id == session_id)
    project: str | None = (await session.execute(statement)).scalar_one_or_none()
    return project


async def _last_summary(session: AsyncSession, project_path: str | None) -> SessionRow | None:
    if project_path is None:
        return None
    statement = (
        select(SessionRow)
        .where(
            SessionRow.project_path == project_path,
            SessionRow.status == "summarized",
            SessionRow.summary.is_not(None),
        )
        # The session started last, as the context block orders them: by `summarized_at`, an old
        # session summarised again (POST /api/summarize, retry-failed, the proxy's idle sweep
        # ending a forgotten session) became the briefing's "last session".
        .order_by(SessionRow.created_at.desc(), SessionRow.summarized_at.desc().nulls_last())
        .limit(1)
    )
    return (await session.scalars(statement)).one_or_none()


BriefedBy = Literal["gemini", "template"]


async def _briefing(
    session: AsyncSession,
    settings: Settings,
    project_path: str | None,
    picked: Picked,
    gate: GeminiGate | None,
    gemini: SharedClient | None,
) -> tuple[str, BriefedBy]:
    """Gemini writes the briefing when configured, its breaker is closed and today's token budget
    is not spent; the template does otherwise, or on failure. Gemini's tokens are counted in
    `llm_usage` with the worker's, so briefings can neither overrun the budget nor go unseen."""
    if (
        settings.gemini_api_key
        and not (gate is not None and gate.breaker_open)
        and await _budget_left(session, settings)
    ):
        prompt = _briefing_prompt(project_path, picked)
        try:
            answer = await _gemini_briefing(settings, prompt, gemini)
        except Exception as error:  # any failure of the model must still leave a briefing
            log.warning("memory.resume.gemini_failed", error=first_line(error)[:200])
            failed = as_call_failed(error)
            # As the worker counts and records: two blocked briefings opened the breaker for
            # every compression, and a rejected answer is billed all the same.
            if gate is not None:
                gate.record_failure(failed)
            await record_rejected(
                session, failed, project_path=project_path or "", model=settings.gemini_model
            )
        else:
            if gate is not None:
                gate.record_success()
            await record_usage(
                session,
                project_path=project_path or "",
                model=settings.gemini_model,
                input_tokens=answer.prompt_tokens or estimate_tokens(prompt),
                output_tokens=answer.billed_output(estimate_tokens(answer.text)),
            )
            return " ".join(answer.text.split()), "gemini"
    return template_briefing(project_path, picked), "template"


async def _budget_left(session: AsyncSession, settings: Settings) -> bool:
    # Read afresh each time: a resume is not a hot path, and the worker's spend must show.
    budget = DailyBudget(settings.gemini_daily_token_budget, refresh_seconds=0)
    if await budget.allows(session):
        return True
    log.warning("gemini.budget_exhausted", budget=budget.daily_budget, using="template briefing")
    return False


def _briefing_prompt(project_path: str | None, picked: Picked) -> str:
    facts = [
        f"{row.key}: {value_text(row.value)}"
        for namespace in NAMESPACES
        for row in picked.memories.get(namespace, [])
    ]
    if picked.summary is not None:
        facts.append(f"last session summary: {picked.summary.summary}")
    words = max(10, (picked.budget // BRIEFING_SHARE) * 3 // 4)
    return (
        "You brief an AI coding agent resuming work on a project. In at most "
        f"{min(words, 80)} words and three sentences, say what the project is, what is in "
        "progress and how far along, and what comes next. Use only these facts; no preamble.\n"
        f"Project: {project_path or 'unknown'}\n" + "\n".join(facts or ["(no facts stored)"])
    )


def _briefing_timeout(settings: Settings) -> float:
    return min(BRIEFING_TIMEOUT_SECONDS, settings.gemini_timeout_seconds)


def briefing_client(settings: Settings) -> SharedClient:
    """The client a serving process keeps for its briefings; its owner closes it at the end."""
    return SharedClient(settings, timeout_ms=max(1, int(_briefing_timeout(settings) * 1000)))


async def _gemini_briefing(
    settings: Settings, prompt: str, gemini: SharedClient | None
) -> Generation:
    client = gemini or briefing_client(settings)
    try:
        # As the worker asks: with 2.5 Flash's thinking on, its thinking tokens counted against
        # the 256-token cap, which could leave the briefing short or empty.
        return await generate_text(
            client.get(),
            model=settings.gemini_model,
            system=None,
            contents=prompt,
            temperature=0.2,
            max_output_tokens=256,
            timeout_s=_briefing_timeout(settings),
        )
    finally:
        if gemini is None:  # a one-off: `agmem resume`
            await client.close()


def _first(memories: dict[str, MemoryRow], *keys: str) -> Any:
    for key in keys:
        if key in memories:
            return memories[key].value
    return None


def _phrase(value: Any) -> str:
    """A memory value as words: lists (and an object's values) joined with commas and "and",
    the rest as text. An agent often stores `project.stack` as an object; its JSON is no prose."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        items = [_phrase(item) for item in value if item not in (None, "")]
        if len(items) <= 1:
            return "".join(items)
        return ", ".join(items[:-1]) + " and " + items[-1]
    return value_text(value).strip().rstrip(".")


def _progress(value: Any) -> str:
    text = _phrase(value)
    return f"{text}%" if text.replace(".", "", 1).isdigit() else text


def template_briefing(project_path: str | None, picked: Picked) -> str:
    """The deterministic briefing, e.g. "Working on Next.js project. 70% through auth
    refactoring. Next: add tests and update docs." """
    memories = {
        row.key: row for ns in NAMESPACES for row in picked.memories.get(ns, []) if row.value
    }
    label = _first(memories, "project.framework", "project.stack", "project.type", "project.name")
    if label is None and project_path:
        label = posixpath.basename(project_path.rstrip("/")) or project_path
    sentences = [f"Working on {_phrase(label)} project." if label else "Resuming work."]
    task = _first(memories, "current.task", "current.focus", "current.goal")
    progress = _first(memories, "current.progress", "current.percent")
    if task is not None and progress is not None:
        sentences.append(f"{_progress(progress)} through {_phrase(task)}.")
    elif task is not None:
        sentences.append(f"Current task: {_phrase(task)}.")
    elif progress is not None:
        sentences.append(f"Progress: {_progress(progress)}.")
    upcoming = _first(memories, "current.next", "current.next_steps", "current.todos")
    if upcoming:
        sentences.append(f"Next: {_phrase(upcoming)}.")
    if picked.summary is not None and picked.summary.summary:
        first_sentence = picked.summary.summary.strip().split(". ")[0].rstrip(".")
        sentences.append(f"Last session: {first_sentence}.")
    if len(sentences) == 1 and not memories and not picked.left_out:
        sentences.append("No memories are stored for it yet.")
    return " ".join(sentences)
