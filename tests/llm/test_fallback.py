"""The offline extractive fallback: deterministic, and readable as prose."""

from __future__ import annotations

import json

from app.llm.fallback import (
    ObservationDigest,
    compress_extractive,
    raw_text,
    summarize_extractive,
)
from app.tokens import estimate_tokens
from tests.realdata import (
    CLAUDE_MD_SESSION,
    FAILED_EDIT_CALL,
    GEMINI_SESSION,
    GO_PROJECT,
    GO_SESSION,
    LAST_EDIT_CALL,
    READ_CALL,
    TODO_CALL,
    gemini_call,
    tool_call,
)


def digest(name: str, kind: str, compressed: str, files: list[str]) -> ObservationDigest:
    return ObservationDigest(
        function_name=name,
        observation_type=kind,
        status="compressed",
        compressed=compressed,
        files=files,
    )


def test_summary_names_the_task_counts_files_and_results_without_doubled_punctuation() -> None:
    observations = [
        digest("read_file", "file_read", "read_file (file_read)\nResult: const key = 1;", ["a.ts"]),
        digest("replace", "file_write", "replace (file_write)\nResult: OK.", ["a.ts"]),
    ]

    summary = summarize_extractive(
        project_path="/p", user_prompt="fix the bug", observations=observations
    )

    assert summary.startswith(
        'This session in /p on "fix the bug" made 2 tool calls (1 file read, 1 file write).'
    )
    assert "It touched a.ts." in summary
    assert "Notable results: Result: const key = 1; Result: OK." in summary
    assert ";;" not in summary
    assert ".." not in summary


def test_compression_is_deterministic_and_keeps_errors() -> None:
    first = compress_extractive(
        function_name="run_shell_command",
        observation_type="code_execution",
        args={"command": "pytest -q"},
        result="collected 3 items\nE   AssertionError: expected 2\n1 failed, 2 passed",
    )
    again = compress_extractive(
        function_name="run_shell_command",
        observation_type="code_execution",
        args={"command": "pytest -q"},
        result="collected 3 items\nE   AssertionError: expected 2\n1 failed, 2 passed",
    )

    assert first == again
    assert "AssertionError: expected 2" in first


def test_real_read_keeps_its_file_span_and_definitions_in_a_few_tokens() -> None:
    name, args, result = tool_call(GO_SESSION, READ_CALL)

    text = compress_extractive(
        function_name=name,
        observation_type="file_read",
        args=args,
        result=result,
        project_path=GO_PROJECT,
    )

    assert text == (
        "Read\n"
        "Files: cmd/entire/cli/config.go\n"
        "Result: lines 225-254 | func loadSettingsFromFile(filePath string) (*EntireSettings, "
        "error) { | func applyDefaultStrategy(settings *EntireSettings) {"
    )
    # `error)` in a signature and `return nil, fmt.Errorf(...)` in the code are no error of the
    # read: the Errors line is for a read that failed.
    assert estimate_tokens(text) <= 55
    assert estimate_tokens(text) < 0.15 * estimate_tokens(str(result))


def test_real_failed_edit_keeps_its_file_and_error_line() -> None:
    name, args, result = tool_call(GO_SESSION, FAILED_EDIT_CALL)

    text = compress_extractive(
        function_name=name,
        observation_type="file_write",
        args=args,
        result=result,
        project_path=GO_PROJECT,
    )

    lines = text.splitlines()
    assert lines[:3] == [
        "Edit",
        "Files: cmd/entire/cli/config.go",
        # The change it tried: small enough to show, not only count.
        'Diff: +1/-1 lines: -return nil, fmt.Errorf("reading settings file: %w", err) '
        "| +return nil, err",
    ]
    assert lines[3].startswith(
        "Errors: <tool_use_error>Found 2 matches of the string to replace, "
        "but replace_all is false."
    )
    assert len(lines) == 4
    assert estimate_tokens(text) <= 80  # the call: ~140 tokens, the error line half of this


def test_real_python_read_outlines_definitions_and_markdown_read_its_headings() -> None:
    name, args, result = gemini_call(GEMINI_SESSION, "tlli955l")  # cogs/gen_reply.py, 24 KB
    python = compress_extractive(
        function_name=name, observation_type="file_read", args=args, result=result
    )
    name, args, result = gemini_call(GEMINI_SESSION, "aao1q07o")  # README.md
    markdown = compress_extractive(
        function_name=name, observation_type="file_read", args=args, result=result
    )

    # `# comments` of Python are no headings; `except Exception:` lines are no errors.
    assert python.splitlines()[1:] == [
        "Files: src/discordbot/cogs/gen_reply.py",
        "Result: 531 lines | def get_tools(model: str) -> list[ToolParam]: | "
        "class RouteDecision(BaseModel): | class ReplyGeneratorCogs(commands.Cog):",
    ]
    assert markdown.splitlines()[2] == (
        "Result: 191 lines | # AI-Powered Discord Bot | ## Features | ### AI Chat"
    )
    assert estimate_tokens(python) <= 60
    assert estimate_tokens(markdown) <= 30


def test_real_write_keeps_its_status_sentence_not_the_echoed_file() -> None:
    name, args, result = gemini_call(GEMINI_SESSION, "4o2js0r9")  # write_file GEMINI.md

    text = compress_extractive(
        function_name=name, observation_type="file_write", args=args, result=result
    )

    assert text == (
        "write_file\n"
        "Files: GEMINI.md\n"
        "Diff: +76/-0 lines\n"
        "Result: Successfully overwrote file: /home/wei/repo/discordbot/GEMINI.md."
    )


def test_raw_text_keeps_the_whole_call_and_unwraps_a_gemini_output() -> None:
    name, args, result = gemini_call(GEMINI_SESSION, "jyi4d5mc")  # update_topic, small

    text = raw_text(function_name=name, args=args, result=result)

    assert text.splitlines()[0] == "update_topic"
    assert text.splitlines()[1] == "Args: " + json.dumps(
        args, ensure_ascii=False, separators=(",", ":")
    )
    assert text.splitlines()[2] == "Result: output: " + result["output"]
    empty = raw_text(function_name="Bash", args={}, result="")
    assert empty == "Bash\nResult: (empty)"


def test_real_edit_shows_its_changed_lines_and_a_large_write_only_their_count() -> None:
    name, args, result = tool_call(GO_SESSION, LAST_EDIT_CALL)
    edit = compress_extractive(
        function_name=name,
        observation_type="file_write",
        args=args,
        result=result,
        project_path=GO_PROJECT,
    )
    name, args, result = gemini_call(GEMINI_SESSION, "4o2js0r9")  # write_file, 76 new lines
    write = compress_extractive(
        function_name=name, observation_type="file_write", args=args, result=result
    )

    # Seven lines replaced by seven, of which one differs: that line, before and after.
    assert edit.splitlines()[2] == (
        'Diff: +1/-1 lines: -return nil, err | +return nil, fmt.Errorf("%w", err)'
    )
    assert estimate_tokens(edit) <= 50 < estimate_tokens(str(args))
    assert write.splitlines()[2] == "Diff: +76/-0 lines"


def test_search_in_a_folder_keeps_its_pattern() -> None:
    # Gemini CLI's search_file_content names the folder it searched and what it looked for.
    text = compress_extractive(
        function_name="search_file_content",
        observation_type="search",
        args={"pattern": "reading settings file", "path": "cmd/entire/cli"},
        result="cmd/entire/cli/config.go:84: return nil, fmt.Errorf(...)",
    )

    assert text.splitlines()[1:3] == ["Files: cmd/entire/cli", "Args: reading settings file"]


def test_real_todo_list_keeps_every_item_and_its_state() -> None:
    name, args, result = tool_call(CLAUDE_MD_SESSION, TODO_CALL)

    text = compress_extractive(
        function_name=name, observation_type="file_write", args=args, result=result
    )

    assert text == (
        "TodoWrite\n"
        "Todos: [x] Analyze codebase structure and files; [x] Identify build, test, and lint "
        "commands; [x] Understand high-level architecture; [x] Check for existing CLAUDE.md, "
        "README.md, or rule files; [~] Create CLAUDE.md with essential information\n"
        "Result: Todos have been modified successfully."
    )


def test_summary_highlights_a_raw_observation_by_its_last_line_with_words() -> None:
    raw = 'Tool: read_file\nResult:\n{\n "content": "export const TTL = 60;"\n}'
    observations = [digest("read_file", "file_read", raw, ["a.ts"])]

    summary = summarize_extractive(project_path="/p", user_prompt=None, observations=observations)

    assert 'Notable results: "content": "export const TTL = 60;".' in summary
    assert "}." not in summary
