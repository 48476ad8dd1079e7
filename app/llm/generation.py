"""One Gemini text generation through google-genai, with its failures made explicit.

Every failure (HTTP error, timeout, transport error, an answer without text) becomes
`GeminiCallFailed`, carrying the server's `Retry-After` when it sent one, so the worker can back
off for exactly as long as asked.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from app.errors import first_line

if TYPE_CHECKING:
    from google import genai
    from google.genai import errors, types

log = structlog.get_logger(__name__)

_RETRY_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")
# The longest delay a server's answer is honoured for (a 429's Retry-After, a RetryInfo's
# retryDelay). Past it a delay is a fault, not a plan: `Retry-After: 1e9` postponed every row
# 11,574 days (`inf`, an interval Postgres cannot hold, failed every compression: a delay that is
# not a finite number is no delay asked, and the usual back-off applies). A quota
# still exhausted when the cap ends costs one call, answered with a fresh delay. The worker's
# longest backoff (`worker_backoff_max_seconds`' default) is as long.
MAX_RETRY_AFTER_SECONDS = 900.0


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_TIME = r"(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})"
_MONTH = r"(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_IMF_FIXDATE = re.compile(
    rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (?P<day>\d{{2}}) {_MONTH} (?P<year>\d{{4}}) {_TIME} GMT"
)
_RFC850_DATE = re.compile(
    r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), "
    rf"(?P<day>\d{{2}})-{_MONTH}-(?P<year>\d{{2}}) {_TIME} GMT"
)
_ASCTIME_DATE = re.compile(
    rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) {_MONTH} (?P<day>[ \d]\d) {_TIME} (?P<year>\d{{4}})"
)
_DATE_FORMS = (_IMF_FIXDATE, _RFC850_DATE, _ASCTIME_DATE)


@dataclass(frozen=True, slots=True)
class Billed:
    """The usage Gemini reported for an answer (usageMetadata), each count None when not sent:
    it bills an answer whether or not it is kept."""

    prompt_tokens: int | None = None  # promptTokenCount
    output_tokens: int | None = None  # candidatesTokenCount
    # thoughtsTokenCount: billed as output. A cap spent thinking (a model whose thinking cannot
    # be turned off) is all of an empty answer's output: recorded as 0, it spent the budget unseen.
    thoughts_tokens: int | None = None

    @property
    def tokens(self) -> int:
        return (self.prompt_tokens or 0) + self.billed_output

    @property
    def billed_output(self) -> int:
        return (self.output_tokens or 0) + (self.thoughts_tokens or 0)


class GeminiCallFailed(Exception):
    """A Gemini call failed; `retry_after` is the delay the server asked for, in seconds.

    `final`: the same call would get the same answer (blocked content, a cut with nothing
    whole): no retry, and no failure for the breaker. `billed`: the usage of an answer Gemini
    billed and the call rejected (none when no answer came)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        final: bool = False,
        billed: Billed | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.final = final
        self.billed = billed or Billed()


def as_call_failed(error: Exception) -> GeminiCallFailed:
    """`error` as a failed call, for the breaker and `llm_usage`, its type named: wrapped by its
    text alone, a timeout's (which has none) gave the breaker's reason "GeminiCallFailed"."""
    if isinstance(error, GeminiCallFailed):
        return error
    text = first_line(error)
    name = type(error).__name__
    return GeminiCallFailed(name if text == name else f"{name}: {text}")


# The finish reasons whose text is an answer: `STOP`, and `MAX_TOKENS` once trimmed to its whole
# sentences. An answer without one (`none`) is taken as before: an absent field says no stop
# part-way. Every other reason is a stop part-way and its text a fragment: a deny-list (SAFETY,
# RECITATION...) stored the fragments of `OTHER`, `LANGUAGE`, `MALFORMED_RESPONSE` and of any
# reason added since. The same prompt is stopped the same way: the row takes its fallback.
_ANSWER_FINISH = frozenset({"STOP", "none"})
_CUT_FINISH = "MAX_TOKENS"
# The reasons that say the content was blocked, for the error's words only.
_BLOCKED_FINISH = frozenset(
    {"SAFETY", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "RECITATION"}
)
# A sentence's end in a cut answer: `.!?` before a space or where the cut ends (closing quotes
# and brackets kept with it: `done."`), a full-width `。！？` before anything (CJK puts no space
# after it: a Chinese answer had no end at all, and its whole sentences were thrown away).
_SENTENCE_END = re.compile(
    r"[.!?][\"'\u2019\u201d)\]]*(?=\s|$)|[\u3002\uff01\uff1f][\"'\u2019\u201d\u300d\u300f\uff09]*"
)
# Where the cut ends, the next token may go on with the mark (`README.` `md`, `Python 3.` `12`,
# `!=`, `?key=`): it ends a sentence there only after a lowercase word or a closed code span or
# quote (`renaming the project.`, `` `uv run`. ``, `"Tracker".`), outside an open code span.
# Cutting testdata's real answers at every character, taking every such mark kept a name's part
# at 140 cuts, and taking none lost a whole sentence at 152; this takes none of the first and
# gives up 5 of the second (4 distinct), after a number (`line 627.`) or a capital (`Threads.`).
# A lowercase word that is a file name's head (`package.` `json`) is taken for an end too: the
# words files are named with are everyday ones (`api/file.ts`, `errors.go`, `prompt.txt` in
# real prompts), and taking the prompt's file names for heads threw away up to 18 of the
# answers' whole sentences ("...updated the `src/cli.rs` file."), which keep no name's part
# without it.
_WORD_AT_CUT = re.compile(r"(?:^|[\s(\"'\u201c\u2018*_])[a-z][a-z'\u2019-]*[*_]*$|[`\"'\u201d)\]]$")
# What comes before a period that ends no sentence: an abbreviation (`e.g.`, `etc.`) or a
# numbered item's number (`1.`). Kept as the answer, `Learned: use the helpers, e.g.` was stored.
# Not `ms`, `sec`, `no` or a capital letter, dotted ones (`U.S.`, `A.I.`) included: "fell to
# 12 ms.", "option B.", "shipped in the U.S." end sentences in developers' summaries far more
# often than they abbreviate (the dotted ones were taken for `e.g.`, and "option B." not).
_NOT_AN_END = re.compile(
    r"(?:(?:^|[\s(,])(?:[a-z](?:\.[a-z])*|(?i:e\.g|i\.e)"
    r"|(?i:etc|vs|cf|approx|incl|esp|viz|al|mr|mrs|dr|jr|sr|fig|eq))|^[ \t]*\d+)$"
)
_FENCE = re.compile(r"[ \t]*(```|~~~)")
# No token of Gemini's is this long: text past `max_output_tokens` times it is no answer to the
# cap asked (a megabyte for a 200-token compression was stored whole as the memory).
MAX_CHARS_PER_TOKEN = 32


@dataclass(frozen=True, slots=True)
class Generation:
    text: str
    prompt_tokens: int | None  # usageMetadata.promptTokenCount, when Gemini sent it
    output_tokens: int | None  # usageMetadata.candidatesTokenCount, when Gemini sent it
    thoughts_tokens: int | None = None  # usageMetadata.thoughtsTokenCount: billed, not the text

    def billed_output(self, estimate: int) -> int:
        """The output tokens Gemini billed: the text's (`estimate` when it sent no count) and
        its thoughts'. Only the text's were recorded: a thinking model's spend went unseen."""
        return (self.output_tokens or estimate) + (self.thoughts_tokens or 0)


async def generate_text(
    client: genai.Client,
    *,
    model: str,
    system: str | None,
    contents: str,
    temperature: float,
    max_output_tokens: int,
    timeout_s: float,
) -> Generation:
    """Ask `model` for text; raise GeminiCallFailed on any failure or an empty answer.

    `timeout_s` bounds the whole answer: the client's timeout bounds each read, and a body
    dripped a few bytes a second ran on for as long as the server liked (the worker's lease
    renewed all along)."""
    # Already imported by the client's maker (app/llm/gemini.py), which defers it.
    from google.genai import errors, types

    config = types.GenerateContentConfig(
        system_instruction=system,
        temperature=temperature,
        max_output_tokens=max_output_tokens,
        thinking_config=_thinking_for(model),
    )
    try:
        async with asyncio.timeout(timeout_s):
            answer = await client.aio.models.generate_content(
                model=model, contents=contents, config=config
            )
    except errors.APIError as error:
        raise GeminiCallFailed(
            f"gemini {error.code}: {error.message or error.status or 'error'}",
            status=error.code,
            retry_after=retry_after_of(error),
        ) from error
    except Exception as error:
        # google-genai raises its transport's own exceptions (httpx, httpx2 or aiohttp, by
        # version), and ValueError for a body that is not JSON: any of them is a failed attempt.
        name = type(error).__name__
        if isinstance(error, TimeoutError):
            raise GeminiCallFailed(
                f"gemini timeout: no whole answer within {timeout_s:g} s"
            ) from error
        if "timeout" in name.lower():
            raise GeminiCallFailed(f"gemini timeout: {name}") from error
        raise GeminiCallFailed(f"gemini call failed: {name}: {error}") from error
    text = _text_of(answer)
    reason = _finish_reason(answer)
    usage = answer.usage_metadata
    # Gemini bills an answer whether or not it is kept: a rejected one's tokens count too.
    billed = Billed(
        prompt_tokens=usage.prompt_token_count if usage else None,
        output_tokens=usage.candidates_token_count if usage else None,
        thoughts_tokens=usage.thoughts_token_count if usage else None,
    )
    if not text:
        feedback = answer.prompt_feedback
        if feedback is not None and feedback.block_reason:
            blocked = str(feedback.block_reason.value)
            raise GeminiCallFailed(
                f"gemini blocked the prompt ({blocked})", final=True, billed=billed
            )
    if reason != _CUT_FINISH and reason not in _ANSWER_FINISH:
        why = "blocked the answer" if reason in _BLOCKED_FINISH else "stopped the answer part-way"
        raise GeminiCallFailed(f"gemini {why} (finish reason {reason})", final=True, billed=billed)
    if len(text) > max_output_tokens * MAX_CHARS_PER_TOKEN:
        raise GeminiCallFailed(
            f"gemini answered {len(text):,} characters for a cap of {max_output_tokens} tokens",
            billed=billed,
        )
    if reason == _CUT_FINISH:
        whole = _whole_part(text)
        if not whole:
            # The same prompt is cut the same way: a retry costs a call and gets this again, and
            # counted toward the breaker three such rows opened it for every compression. A cap
            # spent before any text (all of it thinking) too: it was retried five times, each
            # billed, and counted.
            before = "one whole sentence" if text else "any text"
            raise GeminiCallFailed(
                f"gemini's answer was cut at its token cap before {before} "
                f"(finish reason {reason})",
                final=True,
                billed=billed,
            )
        log.info("gemini.answer_cut", kept_chars=len(whole), dropped_chars=len(text) - len(whole))
        text = whole
    if not text:
        raise GeminiCallFailed(
            f"gemini answered without text (finish reason {reason})", billed=billed
        )
    return Generation(
        text=text,
        prompt_tokens=billed.prompt_tokens,
        output_tokens=billed.output_tokens,
        thoughts_tokens=billed.thoughts_tokens,
    )


def _thinking_for(model: str) -> types.ThinkingConfig | None:
    # Gemini 2.5 Flash thinks by default, and thinking tokens count against max_output_tokens:
    # with a 200-token cap the answer could be empty. Its thinking can be turned off; Pro's cannot.
    from google.genai import types

    if "2.5-flash" in model:
        return types.ThinkingConfig(thinking_budget=0)
    return None


def _text_of(answer: types.GenerateContentResponse) -> str:
    parts: list[str] = []
    for candidate in answer.candidates or []:
        for part in (candidate.content.parts or []) if candidate.content else []:
            if part.text and not part.thought:
                parts.append(part.text)
        if parts:
            break
    return "".join(parts).strip()


def _whole_part(text: str) -> str:
    """What of a cut answer is whole: its whole lines and, after them, the last line's whole
    sentences; "" when nothing is. A code block left open is closed after its whole lines
    (dropped with its fence when it has none), and headings left without their content
    (`Learned:`) are dropped: neither is an answer."""
    *lines, last = text.split("\n")
    kept: list[str] = []
    fence = -1  # the index in `kept` of the open code block's fence, -1 outside one
    for line in lines:
        if _FENCE.match(line):
            fence = -1 if fence >= 0 else len(kept)
        kept.append(line)
    if fence >= 0:
        if len(kept) - fence > 1 and not all(not line.strip() for line in kept[fence + 1 :]):
            kept.append(kept[fence].strip()[:3])
        else:
            del kept[fence:]
    else:
        ends = [
            match.end()
            for match in _SENTENCE_END.finditer(last)
            if (match.group()[0] != "." or not _NOT_AN_END.search(last[: match.start()]))
            and (
                match.end() < len(last)
                or match.group()[0] not in ".!?"
                or _ends_at_cut(last[: match.start()])
            )
        ]
        if ends:
            kept.append(last[: ends[-1]])
    while kept and (
        not kept[-1].strip()
        or kept[-1].rstrip().endswith((":", "\uff1a"))
        or kept[-1].lstrip().startswith("#")
    ):
        kept.pop()
    return "\n".join(kept).strip()


def _ends_at_cut(before: str) -> bool:
    """Whether a `.!?` where the cut ends, after `before`, ends a sentence (`_WORD_AT_CUT`)."""
    return before.count("`") % 2 == 0 and _WORD_AT_CUT.search(before) is not None


def _finish_reason(answer: types.GenerateContentResponse) -> str:
    candidates = answer.candidates or []
    if candidates and candidates[0].finish_reason:
        return str(candidates[0].finish_reason.value)
    return "none"


def retry_after_of(error: errors.APIError) -> float | None:
    """Seconds to wait from the `Retry-After` header (seconds, or an HTTP-date), else from a
    google.rpc.RetryInfo detail: none for a delay that is not a finite number, at most
    `MAX_RETRY_AFTER_SECONDS`."""
    asked = _asked_delay(error)
    if asked is None or not math.isfinite(asked):
        return None
    if asked > MAX_RETRY_AFTER_SECONDS:
        log.warning("gemini.retry_after_capped", asked=asked, seconds=MAX_RETRY_AFTER_SECONDS)
    return capped_delay(asked)


def capped_delay(seconds: float) -> float:
    """`seconds` between 0 and `MAX_RETRY_AFTER_SECONDS` (a NaN is none): for every sleep and
    SQL interval a server's delay reaches, whoever handed it on."""
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _http_date(value: str) -> float | None:
    """An HTTP-date's epoch seconds, exactly in one of RFC 9110 §5.6.7's three forms (the
    IMF-fixdate `Fri, 27 Nov 2026 03:00:00 GMT`, the obsolete RFC 850 and asctime forms), None
    for anything else: a lenient parse read `<date> junk`, the date 1,000 times over, a zone
    `ZZZ` or none at all as the date it started with. A date is GMT by definition (asctime's,
    which says no zone, included). A date past is then a delay below 0: no wait. It was read as
    no delay asked: the row came back after its own back-off, into the quota."""
    match = next((m for form in _DATE_FORMS if (m := form.fullmatch(value)) is not None), None)
    if match is None:
        return None
    year = int(match["year"])
    if len(match["year"]) == 2:
        # RFC 9110: a two-digit year more than 50 years ahead is the latest past year with it.
        this_year = datetime.now(UTC).year
        year += this_year - this_year % 100
        if year > this_year + 50:
            year -= 100
    try:
        when = datetime(
            year,
            _MONTHS.index(match["month"]) + 1,
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"]),
            tzinfo=UTC,
        )
    except ValueError:  # no such day (31 Nov), hour or second
        return None
    return when.timestamp()


def _server_now(headers: Any) -> float:
    """The answer's `Date`, the server's clock when it answered: an HTTP-date Retry-After is
    read against it (RFC 9110 10.2.3). Against ours, a server clock a year behind asked no wait
    and one an hour ahead the 900 s cap for 300 s. Ours when the answer has no readable one."""
    sent = headers.get("date")
    when = _http_date(sent) if isinstance(sent, str) else None
    return time.time() if when is None else when


def _asked_delay(error: errors.APIError) -> float | None:
    headers: Any = getattr(error.response, "headers", None)
    if headers is not None:
        value = headers.get("retry-after")
        if value is not None:
            try:
                return float(value)
            except ValueError:
                pass
            until = _http_date(value)
            if until is not None:
                return until - _server_now(headers)
            # Once per answer that carries one (a 429's, or a 503's), then the RetryInfo
            # or the usual back-off: a proxy's garbled header must not be taken for "no wait"
            # unsaid.
            log.warning("gemini.retry_after_unreadable", asked=value[:100])
    details: Any = error.details
    if isinstance(details, dict):
        for item in (details.get("error") or {}).get("details") or []:
            delay = item.get("retryDelay") if isinstance(item, dict) else None
            match = _RETRY_DELAY.match(delay) if isinstance(delay, str) else None
            if match:
                return float(match.group(1))
    return None
