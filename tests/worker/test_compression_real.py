"""Compression of real tool calls from /work/shared/testdata, captured through the API and drained
by a worker without Gemini: what is stored, what it costs, what it keeps."""

from __future__ import annotations

from typing import Any

import psycopg
from fastapi.testclient import TestClient

from app.llm.compress import observation_text
from app.tokens import estimate_tokens, truncate_to_tokens
from tests.conftest import make_settings
from tests.realdata import (
    CLAUDE_MD_SESSION,
    FMT_LINT_CALL,
    GEMINI_SESSION,
    GO_PROJECT,
    GO_SESSION,
    LAST_TODO_CALL,
    LINT_CALL,
    READ_CALL,
    gemini_call,
    tool_call,
    tool_calls,
)
from tests.worker.builders import drain, row


def capture(
    client: TestClient, project: str, calls: list[tuple[str, Any, Any]], *, end: bool = False
) -> dict[str, int]:
    """Each call captured through the API (then the session ended, with `end`): its id, with
    capture's estimate of its tokens."""
    session = client.post("/api/session/start", json={"projectPath": project}).json()["id"]
    ids = {}
    for name, args, result in calls:
        call = client.post(
            "/api/observe",
            json={"sessionId": session, "functionName": name, "functionArgs": args},
        ).json()["id"]
        answered = client.post(
            "/api/observe/result",
            json={
                "sessionId": session,
                "functionName": name,
                "result": result,
                "observationId": call,
            },
        )
        assert answered.status_code == 200, answered.text
        ids[call] = answered.json()["originalTokens"]
    if end:
        assert client.post("/api/session/end", json={"sessionId": session}).status_code == 202
    return ids


def test_small_real_calls_are_kept_whole_or_extracted_losing_no_line_and_shown_so(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    calls = [tool_call(GO_SESSION, FMT_LINT_CALL), tool_call(GO_SESSION, LINT_CALL)]
    ids = capture(client, GO_PROJECT, calls)
    drain(make_settings(), database_url)
    (fmt_lint, fmt_captured), (lint, _) = ids.items()

    # Its extract would drop lines of the linter's report: kept whole, in compact form.
    whole = row(db, "SELECT * FROM observations WHERE id = %s", fmt_lint)
    assert whole["generated_by"] == "raw"
    text = whole["compressed_data"]
    assert text.startswith(
        "Bash\n"
        # jsonb's key order: shorter keys first.
        'Args: {"command":"mise run fmt && mise run lint","timeout":60000,'
        '"description":"Format and lint the code"}\n'
        "Result: Exit code 1\n[fmt] $ gofmt -w .\n"
    )
    assert text.endswith("1 issues:\n* wrapcheck: 1")
    # Fewer tokens than the labelled, indented text built for Gemini.
    name, args, result = calls[0]
    verbose = observation_text(
        function_name=name,
        observation_type="code_execution",
        args=args,
        result=result,
        max_chars=24_000,
    )
    assert whole["compressed_tokens"] == estimate_tokens(text) < estimate_tokens(verbose)
    # The call as capture measured it; the labels cost a few tokens more, and nothing is saved.
    assert whole["original_tokens"] == fmt_captured < whole["compressed_tokens"]
    assert whole["tokens_saved"] == 0

    # Its extract holds every line of its strings, and is shorter: only JSON was left out.
    extract = row(db, "SELECT * FROM observations WHERE id = %s", lint)
    assert extract["generated_by"] == "extractive"
    assert extract["compressed_data"] == (
        "Bash mise run lint · Run linter to check the fix\n"
        "Result: 0 issues. | [lint] $ golangci-lint run ./..."
    )

    block = client.get(
        "/api/context", params={"projectPath": GO_PROJECT, "prompt": "mise run fmt lint"}
    ).text
    # Quoted with their lines, indented under their list items.
    assert (
        '  Bash\n  Args: {"command":"mise run fmt && mise run lint","timeout":60000,"description":'
        '"Format and lint the code"}\n  Result: Exit code 1\n  [fmt] $ gofmt -w .\n  [lint]'
    ) in block
    assert "  Bash mise run lint · Run linter to check the fix\n  Result: 0 issues." in block
    assert "Tool: Bash" not in block
    assert "Arguments:" not in block


def test_small_real_to_do_list_is_extracted_its_status_and_item_rewording_left_out(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    ((todo, captured),) = capture(
        client, "/p", [tool_call(CLAUDE_MD_SESSION, LAST_TODO_CALL)]
    ).items()
    drain(make_settings(), database_url)

    stored = row(db, "SELECT * FROM observations WHERE id = %s", todo)
    # Kept whole it cost more than the call (84 tokens): the item's `activeForm` restates it
    # ("Creating CLAUDE.md ..."), and the tool's reply is its success status and a nudge to the
    # model ("Ensure that you continue to use the todo list ...").
    assert stored["generated_by"] == "extractive"
    assert stored["compressed_data"] == (
        "TodoWrite\nTodos: [x] Create CLAUDE.md with essential information"
    )
    assert stored["tokens_saved"] == captured - stored["compressed_tokens"] > 50


def test_small_real_call_whose_reply_echoes_its_arguments_is_extracted(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    name, args, result = gemini_call(GEMINI_SESSION, "jyi4d5mc")  # update_topic
    ((topic, captured),) = capture(client, "/p", [(name, args, result)]).items()
    drain(make_settings(), database_url)

    stored = row(db, "SELECT * FROM observations WHERE id = %s", topic)
    # Its reply, `Strategic Intent: <strategic_intent>`, repeats an argument the extract shows;
    # its summary, 130 tokens of Chinese, is cut at 40 like a line of English.
    assert stored["generated_by"] == "extractive"
    assert stored["compressed_data"] == (
        f"update_topic {truncate_to_tokens(args['summary'], 40)} · {args['strategic_intent']}"
    )
    assert stored["compressed_tokens"] < captured


def test_extract_of_a_real_read_counts_the_call_as_capture_measured_it(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    name, args, result = tool_call(GO_SESSION, READ_CALL)
    ((read, captured),) = capture(client, GO_PROJECT, [(name, args, result)]).items()
    drain(make_settings(), database_url)

    stored = row(db, "SELECT * FROM observations WHERE id = %s", read)
    assert stored["generated_by"] == "extractive"
    # The call's own size, not that of the labelled, indented text built for Gemini (larger).
    verbose = observation_text(
        function_name=name, observation_type="file_read", args=args, result=result, max_chars=24_000
    )
    assert stored["original_tokens"] == captured < estimate_tokens(verbose)
    assert stored["tokens_saved"] == captured - stored["compressed_tokens"]


def test_extract_names_the_files_and_errors_capture_found_in_the_call(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    write = gemini_call(GEMINI_SESSION, "4o2js0r9")  # write_file GEMINI.md, 6 KB of content
    read = gemini_call(GEMINI_SESSION, "fkoen8u1")  # read_file pyproject.toml, 22 KB
    ids = list(capture(client, "/home/wei/repo/discordbot", [write, read]))
    drain(make_settings(), database_url)

    texts = [row(db, "SELECT * FROM observations WHERE id = %s", i) for i in ids]
    assert [t["generated_by"] for t in texts] == ["extractive", "extractive"]
    # Between the names and the result, which stays the last line (a summary quotes it).
    assert texts[0]["compressed_data"].splitlines() == [
        "write_file GEMINI.md",
        "Diff: +76/-0 lines",
        # `cli.py` is in `src/discordbot/cli.py`: its place goes to the next name.
        "Mentions: scripts/artale_data.py, src/discordbot/cli.py, "
        "src/discordbot/cogs/_gen_reply/prompts.py, pyproject.toml, CLAUDE.md",
        "Result: overwrote",
    ]
    assert (
        "Mentions: NotImplementedError, ValueError, AssertionError" in (texts[1]["compressed_data"])
    )
    assert texts[1]["compressed_tokens"] <= 60 < texts[1]["original_tokens"] // 50


def test_fallback_summary_of_a_real_session_names_its_error_and_last_change(
    client: TestClient, db: psycopg.Connection[Any], database_url: str
) -> None:
    capture(client, GO_PROJECT, tool_calls(GO_SESSION), end=True)
    drain(make_settings(), database_url)

    summary = row(db, "SELECT summary, status FROM sessions")
    assert summary["status"] == "summarized"
    # The project is named once; its files relative to it. The lint failure and the final test
    # run, named by its command, not the first two results of the session (a grep and a read).
    assert summary["summary"].endswith(
        "made 9 tool calls (3 commands, 2 file reads, 3 file writes, 1 search). "
        "It touched cmd/entire/cli/config.go. "
        "Notable results: [lint] ERROR task failed; "
        "Bash mise run test · Run tests to verify the fix: ? entire.io/cli/cmd/entire [no test "
        "files] | ok entire.io/cli/cmd/entire/cli 2.120s | ok…."
    )
