"""Gemini read as a hostile upstream: answers no real Gemini should send (a body dripped slower
than any timeout, text far past the token cap asked, a withheld answer's partial text, an
answer cut at its cap) through the real google-genai client and the fake server, into the real
database. Each is a failed attempt or the fallback, never a stuck lane or a stored fragment."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import psycopg
import pytest

from app.llm.compress import COMPRESSION_MAX_OUTPUT_TOKENS
from app.llm.generation import _whole_part
from app.llm.summarize import SUMMARY_INSTRUCTIONS
from tests.fakes.gemini import FakeResponse, RecordedRequest, fake_gemini, text_answer
from tests.llm.test_compress_gemini import ANSWER, gemini_settings
from tests.realdata import TESTDATA, gemini_answers
from tests.worker.builders import drain, make_observation, make_session, row

# CJK ends a sentence with no space after it, and a full-width end closes no name.
_FULL_WIDTH_ENDS = ("\u3002", "\uff01", "\uff1f", "\u300d", "\u300f", "\uff09")


def candidate(text: str, finish: str) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": finish}
        ],
        "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 20},
    }


def stored(db: psycopg.Connection[Any]) -> dict[str, Any]:
    return row(
        db,
        "SELECT status, generated_by, compressed_data, last_error, attempts FROM observations",
    )


def test_an_answer_dripped_slower_than_the_timeout_is_a_timed_out_attempt(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # Each gap under the read timeout, the whole far over it: the call ran on past
    # AGMEM_GEMINI_TIMEOUT_SECONDS (a drip of a big body: for hours, the claim renewed all along).
    make_session(db)
    make_observation(db, "o1")
    body = json.dumps(text_answer(ANSWER)).encode()
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(raw=body, drip_s=0.2, drip_bytes=8))
        started = time.monotonic()
        drain(gemini_settings(fake.url, gemini_timeout_seconds=1.0), database_url)
        took = time.monotonic() - started

    found = stored(db)
    assert (found["status"], found["attempts"]) == ("captured", 1)
    assert "timeout" in found["last_error"]
    assert took < len(body) / 8 * 0.2  # the drip alone would take ~5 s


def test_text_far_past_the_token_cap_is_not_stored(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # A 200-token compression answered with a megabyte was stored whole as the memory.
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=text_answer("Learned: " + "x " * 500_000)),
        )
        drain(gemini_settings(fake.url), database_url)

    found = stored(db)
    assert (found["status"], found["attempts"], found["compressed_data"]) == ("captured", 1, None)
    assert f"{COMPRESSION_MAX_OUTPUT_TOKENS} tokens" in found["last_error"]


@pytest.mark.parametrize("finish", ["SAFETY", "RECITATION"])
def test_a_withheld_answers_partial_text_goes_to_the_fallback(
    finish: str, db: psycopg.Connection[Any], database_url: str
) -> None:
    # Gemini stopped the answer part-way for its content: the fragment was stored as the memory.
    make_session(db)
    make_observation(db, "o1", args={"path": "src/keep.ts"})
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=candidate("Learned: the token is checked ag", finish)),
        )
        drain(gemini_settings(fake.url), database_url)
        calls = len(fake.calls(":generateContent"))

    found = stored(db)
    assert calls == 1  # the same text is withheld again: no retry
    assert (found["status"], found["generated_by"]) == ("compressed", "extractive")
    assert "src/keep.ts" in found["compressed_data"]
    assert "ag" not in found["compressed_data"].split()
    assert finish in found["last_error"]


def test_an_answer_cut_at_its_cap_keeps_its_whole_lines_only(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # The fragment after the last whole line was stored, cut mid-word.
    make_session(db)
    make_observation(db, "o1")
    cut = "Learned: validateToken verifies with key1.\nChanged: the retry loop now st"
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(body=candidate(cut, "MAX_TOKENS")))
        drain(gemini_settings(fake.url), database_url)

    found = stored(db)
    assert (found["status"], found["generated_by"]) == ("compressed", "gemini:gemini-2.5-flash")
    assert found["compressed_data"] == "Learned: validateToken verifies with key1."


@pytest.mark.parametrize(
    ("cut", "kept"),
    [
        # A full-width end needs no space after it: the whole sentence was thrown away.
        (
            "修复了登录模块中的令牌验证错误。添加了重试逻辑，并更新了测",
            "修复了登录模块中的令牌验证错误。",
        ),
        ("测试说「完成了。」然后重试逻辑更", "测试说「完成了。」"),
        ('Learned: the test said "done." Then the ret', 'Learned: the test said "done."'),
        ("Learned: use the helpers, e.g. validateT", ""),
        (
            "Learned: the key rotates.\nChanged:\n- the retry loop now st",
            "Learned: the key rotates.",
        ),
        ("Learned:\nthe retry loo", ""),
        (
            "Changed: the parser.\n```python\nparse(text)\nreturn par",
            "Changed: the parser.\n```python\nparse(text)\n```",
        ),
        ("Changed: the parser.\n```python\nreturn par", "Changed: the parser."),
        ("Steps:\n1. Fix the tok", ""),
        # Units, "no" and a capital letter end sentences in developers' summaries: each of
        # these was taken for an abbreviation and the good sentence thrown away (rev-mends21).
        ("Search p95 fell from 48 ms to 12 ms. Next the", "Search p95 fell from 48 ms to 12 ms."),
        ("Went with option B. Then", "Went with option B."),
        ("Set the timeout to 10 sec. Then", "Set the timeout to 10 sec."),
        ("The answer is no. Then", "The answer is no."),
        # Dotted capitals end a sentence as a capital letter does; lowercase ones do not.
        ("Read the U.S. Then", "Read the U.S."),
        ("Shipped the A.I. Then", "Shipped the A.I."),
        ("Use a cache, i.e. Redis. Then", "Use a cache, i.e. Redis."),
        ("Use a cache, E.g. Redis wh", ""),
        # A period where the cut ends may go on as a name, a version or a URL (the next token
        # `md`, `12`, `com`): real cuts of testdata's answers kept `README.` and `Python 3.`.
        ("I am preparing to read the `Cargo.", ""),
        (
            "I'm now focusing on the stack. The code reveals a Python 3.",
            "I'm now focusing on the stack.",
        ),
        ("好的，我將執行您要求的任務。首先，我會讀取 `Cargo.", "好的，我將執行您要求的任務。"),
        ("I read the Cargo.", ""),
        ("See `src/cli.", ""),
        ("Check app.config.", ""),
        ("Open https://example.com/?", ""),
        ("Went with option B.", ""),
        ("好的，文件讀取完畢。", "好的，文件讀取完畢。"),
        # A lowercase word's period where the cut ends is a sentence's end far more often than
        # a name's part in them: the whole sentence went, and with nothing else whole, the answer.
        ("The next step is renaming the project.", "The next step is renaming the project."),
        ("Reading it now. The tests passed!", "Reading it now. The tests passed!"),
        (
            "I tried the strengthened emphasis on `uv run`.",
            "I tried the strengthened emphasis on `uv run`.",
        ),
        ('I replaced it with "Vibe Code Tracker".', 'I replaced it with "Vibe Code Tracker".'),
        ("It is a **follow-up**.", "It is a **follow-up**."),
        ("Done. Use a cache, e.g.", "Done."),
    ],
)
def test_whole_part_keeps_whole_sentences_only(cut: str, kept: str) -> None:
    assert _whole_part(cut) == kept


def test_whole_part_keeps_a_file_names_head_at_the_cut_as_an_end() -> None:
    # The documented limit: `package.` may go on with `json`, but so may `file.` with `ts` and
    # `errors.` with `go` (names real prompts hold); taking the prompt's and the answer's file
    # names for heads kept no name's part of testdata's answers and threw away 2 to 18 of
    # their whole sentences, 6 to 21 of the memory files' prose lines, with real prompts.
    cut = "Read package.json first. Then bumped package."
    assert _whole_part(cut) == cut


@pytest.mark.parametrize(
    "last",
    [
        # Gemini's own sentences (testdata's sessions) whose last word the file read names as a
        # file's head: `api/file.ts`, `errors.go`.
        "I've successfully updated the `src/cli.rs` file.",
        "I'll run `cargo check` to ensure there are no compilation errors.",
    ],
)
def test_an_answer_cut_after_a_word_its_long_prompt_names_a_file_with_keeps_that_sentence(
    db: psycopg.Connection[Any], database_url: str, last: str
) -> None:
    # Taken for a name's head (`file.` `ts`), the cut's last sentence was thrown away: with
    # real prompts, 2 to 18 of testdata's answers' sentences, cut at every character.
    make_session(db)
    claude_md = (TESTDATA / "memory-md/entireio-cli_CLAUDE.md").read_text(encoding="utf-8")
    make_observation(db, "o1", args={"file_path": "CLAUDE.md"}, result=claude_md)
    cut = f"Learned: the CLI wraps its errors in `SilentError`. {last}"
    with fake_gemini() as fake:
        fake.on(":generateContent", lambda _r: FakeResponse(body=candidate(cut, "MAX_TOKENS")))
        drain(gemini_settings(fake.url), database_url)

    found = stored(db)
    assert (found["status"], found["generated_by"]) == ("compressed", "gemini:gemini-2.5-flash")
    assert found["compressed_data"] == cut


def test_whole_part_ends_real_answers_where_their_text_ends_a_sentence() -> None:
    # Each of Gemini's own answers in testdata (English and Chinese), cut at every character.
    # Wrong: what is kept ends neither a line nor a word of the whole answer (23d5d19 kept a
    # name's part, `README.|md`, `Cargo.|toml`, `3.|12`, at 140 cuts, 125 distinct). Lost: a cut
    # just after a sentence's end keeps less than the same cut with the space that follows it
    # in the whole answer (6b32a92 lost "...renaming the project." so at 152 cuts, 126 distinct).
    # Given up by the rule, as a name's part cannot be told from them at the cut: a number
    # (`line 627.` is `Python 3.`) and a capitalised word (`as Threads.` is `the Cargo.`).
    wrong: set[str] = set()
    lost: set[str] = set()
    given_up = 0
    cuts = 0
    for answer in gemini_answers():
        for end in range(1, len(answer) + 1):
            cut = answer[:end]
            kept = _whole_part(cut)
            following = answer[end : end + 1] or " "
            if following.isspace() and kept != _whole_part(cut + " "):
                if re.search(r"(?:\d|\b[A-Z][\w-]*)[.!?]$", cut):
                    given_up += 1
                else:
                    lost.add(f"{cut[-40:]}|{answer[end : end + 5]}")
            if not kept or kept.endswith("```"):
                continue
            cuts += 1
            start = len(cut) - len(cut.lstrip())
            assert cut[start:].startswith(kept)
            after = answer[start + len(kept) :]
            if after and not after[0].isspace() and not kept.endswith(_FULL_WIDTH_ENDS):
                wrong.add(
                    f"{answer[max(0, start + len(kept) - 20) : start + len(kept)]}|{after[:10]}"
                )
    assert cuts > 10_000
    assert not wrong, sorted(wrong)[:20]
    assert not lost, sorted(lost)[:20]
    assert given_up <= 5


def test_an_answer_cut_before_one_whole_sentence_goes_to_the_fallback_uncounted(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # The same cut comes again: it was retried and counted toward the breaker, and three such
    # rows opened it (every compression extractive for 300 s).
    make_session(db)
    for n in range(4):
        make_observation(db, f"o{n}", args={"path": f"src/keep{n}.ts"})
    cut = candidate("Learned: validateToken ver", "MAX_TOKENS")
    with fake_gemini() as fake:
        fake.queue(":generateContent", *[FakeResponse(body=cut) for _ in range(3)])
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer(ANSWER)))
        drain(gemini_settings(fake.url, gemini_failure_threshold=3), database_url)
        calls = len(fake.calls(":generateContent"))

    rows = db.execute(
        "SELECT generated_by, compressed_data, last_error, attempts FROM observations "
        "ORDER BY created_at, id"
    ).fetchall()
    assert calls == 4
    by = sorted(r[0] for r in rows)
    assert by == ["extractive", "extractive", "extractive", "gemini:gemini-2.5-flash"]
    for generated_by, data, error, attempts in rows:
        assert attempts == 1
        if generated_by == "extractive":
            assert "MAX_TOKENS" in error
            assert "ver" not in data.split()


def empty_cut() -> dict[str, Any]:
    """A model whose thinking cannot be turned off (2.5 Pro) spending the whole cap thinking:
    `MAX_TOKENS`, no text, its thoughts billed."""
    return {
        "candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}],
        "usageMetadata": {
            "promptTokenCount": 30,
            "thoughtsTokenCount": 200,
            "totalTokenCount": 230,
        },
    }


def test_an_answer_cut_before_any_text_goes_to_the_fallback_uncounted(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # The same prompt spends the same cap the same way: it was a failed attempt, retried up to
    # five times (each billed) and counted, three such rows opening the breaker.
    make_session(db)
    for n in range(4):
        make_observation(db, f"o{n}", args={"path": f"src/keep{n}.ts"})
    with fake_gemini() as fake:
        fake.queue(":generateContent", *[FakeResponse(body=empty_cut()) for _ in range(3)])
        fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer(ANSWER)))
        drain(gemini_settings(fake.url, gemini_failure_threshold=3), database_url)
        calls = len(fake.calls(":generateContent"))

    rows = db.execute(
        "SELECT status, generated_by, last_error, attempts FROM observations ORDER BY id"
    ).fetchall()
    assert calls == 4
    assert sorted(str(r[1]) for r in rows) == ["extractive"] * 3 + ["gemini:gemini-2.5-flash"]
    for status, generated_by, error, attempts in rows:
        assert (status, attempts) == ("compressed", 1)
        if generated_by == "extractive":
            assert "MAX_TOKENS" in error
            assert "a retry would get the same answer" in error


def test_an_answer_cut_before_any_text_bills_its_thoughts(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # Its output is all thinking: recorded without it, a run of them spent the budget unseen.
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.queue(":generateContent", FakeResponse(body=empty_cut()))
        drain(gemini_settings(fake.url), database_url)

    usage = row(db, "SELECT sum(input_tokens) AS i, sum(output_tokens) AS o FROM llm_usage")
    assert (usage["i"], usage["o"]) == (30, 200)


def test_a_kept_answers_thoughts_are_billed_but_not_its_compressed_size(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # A model that thinks (2.5 Pro: its thinking cannot be turned off) is billed its thoughts as
    # output; only candidatesTokenCount reached llm_usage and the daily budget.
    make_session(db)
    make_observation(db, "o1")
    answer = text_answer(ANSWER, prompt_tokens=700, output_tokens=20)
    answer["usageMetadata"]["thoughtsTokenCount"] = 150
    with fake_gemini() as fake:
        fake.queue(":generateContent", FakeResponse(body=answer))
        drain(gemini_settings(fake.url), database_url)

    usage = row(db, "SELECT sum(input_tokens) AS i, sum(output_tokens) AS o FROM llm_usage")
    assert (usage["i"], usage["o"]) == (700, 170)
    assert row(db, "SELECT compressed_tokens FROM observations")["compressed_tokens"] == 20


def test_a_kept_summarys_thoughts_are_billed(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    make_session(db, status="ending")
    make_observation(db, "o1")
    summary = text_answer("The session fixed the token check.", prompt_tokens=400, output_tokens=9)
    summary["usageMetadata"]["thoughtsTokenCount"] = 120

    def answer(request: RecordedRequest) -> FakeResponse:
        system = request.body["systemInstruction"]["parts"][0]["text"]
        if system == SUMMARY_INSTRUCTIONS:
            return FakeResponse(body=summary)
        return FakeResponse(body=text_answer(ANSWER, prompt_tokens=700, output_tokens=20))

    with fake_gemini() as fake:
        fake.on(":generateContent", answer)
        drain(gemini_settings(fake.url), database_url)

    assert row(db, "SELECT summary_generated_by FROM sessions")["summary_generated_by"] == (
        "gemini:gemini-2.5-flash"
    )
    usage = row(db, "SELECT sum(input_tokens) AS i, sum(output_tokens) AS o FROM llm_usage")
    assert (usage["i"], usage["o"]) == (700 + 400, 20 + 9 + 120)


@pytest.mark.parametrize(
    "finish", ["OTHER", "LANGUAGE", "MALFORMED_RESPONSE", "TOO_MANY_TOOL_CALLS", "MODEL_ARMOR"]
)
def test_an_answer_with_any_finish_but_stop_goes_to_the_fallback(
    finish: str, db: psycopg.Connection[Any], database_url: str
) -> None:
    # A deny-list of finish reasons stored every other reason's fragment as the memory.
    make_session(db)
    make_observation(db, "o1", args={"path": "src/keep.ts"})
    with fake_gemini() as fake:
        fake.on(
            ":generateContent",
            lambda _r: FakeResponse(body=candidate("Learned: the token is checked ag", finish)),
        )
        drain(gemini_settings(fake.url), database_url)
        calls = len(fake.calls(":generateContent"))

    found = stored(db)
    assert calls == 1
    assert (found["status"], found["generated_by"]) == ("compressed", "extractive")
    assert finish in found["last_error"]


@pytest.mark.parametrize(
    "body",
    [
        candidate("Learned: the token is checked ag", "SAFETY"),
        candidate("Learned: validateToken ver", "MAX_TOKENS"),
        candidate("Learned: " + "x " * 5_000, "STOP"),
    ],
    ids=["blocked", "cut", "oversize"],
)
def test_a_rejected_answers_tokens_count_toward_the_budget(
    body: dict[str, Any], db: psycopg.Connection[Any], database_url: str
) -> None:
    # Gemini billed them; only a stored answer's tokens reached llm_usage and the daily budget.
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.queue(":generateContent", FakeResponse(body=body))
        drain(gemini_settings(fake.url), database_url)

    usage = row(db, "SELECT sum(input_tokens) AS i, sum(output_tokens) AS o FROM llm_usage")
    assert (usage["i"], usage["o"]) == (30, 20)


def test_a_body_cut_short_is_a_failed_attempt_retried(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # The connection closed part-way through the promised body: an attempt that failed on the
    # wire (retried after its back-off), not a fallback nor a stored fragment.
    make_session(db)
    make_observation(db, "o1")
    with fake_gemini() as fake:
        fake.queue(":generateContent", FakeResponse(body=text_answer(ANSWER), cut_at=40))
        drain(gemini_settings(fake.url), database_url)
        assert len(fake.calls(":generateContent")) == 1

    found = stored(db)
    assert (found["status"], found["attempts"], found["compressed_data"]) == ("captured", 1, None)
    assert "RemoteProtocolError" in found["last_error"]
