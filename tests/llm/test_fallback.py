"""The offline extractive fallback: deterministic, and readable as prose."""

from __future__ import annotations

import json

import pytest

from app.llm.fallback import (
    ObservationDigest,
    compress_extractive,
    raw_text,
    summarize_extractive,
)
from app.privacy import cap_text
from app.tokens import estimate_tokens, truncate_to_tokens
from tests.realdata import (
    CLAUDE_MD_SESSION,
    DENIED_WRITE_CALL,
    FAILED_EDIT_CALL,
    GEMINI_SESSION,
    GO_PROJECT,
    GO_SESSION,
    GREP_CALL,
    LAST_EDIT_CALL,
    READ_CALL,
    TODO_CALL,
    gemini_call,
    tool_call,
    tool_calls,
)


def digest(name: str, kind: str, compressed: str, files: list[str]) -> ObservationDigest:
    return ObservationDigest(
        function_name=name,
        observation_type=kind,
        status="compressed",
        compressed=compressed,
        files=files,
    )


def go_extract(call_id: str, observation_type: str) -> str:
    """The extract of one call of the Go session, in its project."""
    name, args, result = tool_call(GO_SESSION, call_id)
    return compress_extractive(
        function_name=name,
        observation_type=observation_type,
        args=args,
        result=result,
        project_path=GO_PROJECT,
    )


def test_summary_names_the_task_counts_files_and_results_without_doubled_punctuation() -> None:
    observations = [
        digest("read_file", "file_read", "read_file a.ts\nResult: const key = 1;", ["a.ts"]),
        digest("replace", "file_write", "replace a.ts\nResult: OK.", ["a.ts"]),
    ]

    summary = summarize_extractive(
        project_path="/p", user_prompt="fix the bug", observations=observations
    )

    assert summary.startswith(
        'This session in /p on "fix the bug" made 2 tool calls (1 file read, 1 file write).'
    )
    assert "It touched a.ts." in summary
    assert "Notable results: read_file a.ts: const key = 1; replace a.ts: OK." in summary
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
    text = go_extract(READ_CALL, "file_read")

    # The file on the tool's line: `Read cmd/entire/cli/config.go` reads as what was done.
    assert text == (
        "Read cmd/entire/cli/config.go\n"
        "Result: lines 225-254 | func loadSettingsFromFile(filePath string) (*EntireSettings, "
        "error) { | func applyDefaultStrategy(settings *EntireSettings) {"
    )
    # `error)` in a signature and `return nil, fmt.Errorf(...)` in the code are no error of the
    # read: the Errors line is for a read that failed.
    assert estimate_tokens(text) <= 55
    assert estimate_tokens(text) < 0.15 * estimate_tokens(str(tool_call(GO_SESSION, READ_CALL)[2]))


PARSER_PY = (
    "class ParseError(Exception):\n"
    '    """Raised when parsing failed: the input cannot be read."""\n'
    "\n"
    "def parse(text: str) -> Tree:\n"
    "    ...\n"
)


def test_a_read_of_source_code_is_outlined_not_called_an_error() -> None:
    # The first lines of a read were scanned for error words: `class ParseError(Exception):`
    # was shown as `Errors:` and the file's outline dropped.
    numbered = "\n".join(f"{n:6}→{line}" for n, line in enumerate(PARSER_PY.split("\n"), 1))
    tabbed = "\n".join(f"{n}\t{line}" for n, line in enumerate(PARSER_PY.split("\n"), 1))
    for args, result in (
        ({"absolute_path": "/p/parser.py"}, {"output": PARSER_PY}),  # Gemini CLI
        ({"file_path": "/p/parser.py"}, numbered),  # Claude Code
        ({"path": "/p/parser.py"}, tabbed),  # `cat -n`
    ):
        text = compress_extractive(
            function_name="read", observation_type="file_read", args=args, result=result
        )
        assert "Errors" not in text, text
        assert "class ParseError(Exception): | def parse(text: str) -> Tree:" in text, text


def test_a_read_that_failed_keeps_its_error() -> None:
    for result, error in (
        ({"error": "File not found: /p/gone.py"}, "File not found: /p/gone.py"),
        ("<tool_use_error>File does not exist.</tool_use_error>", "<tool_use_error>File does"),
        ("Error: ENOENT: no such file or directory, open '/p/gone.py'", "Error: ENOENT"),
        ("Permission denied: /p/secret.py", "Permission denied"),
    ):
        text = compress_extractive(
            function_name="read",
            observation_type="file_read",
            args={"file_path": "/p/gone.py"},
            result=result,
        )
        assert f"Errors: {error}" in text, text
        assert "Result:" not in text


# Real failures of reads and writes whose first word is none of the error words: a tool's or
# an exception's name, or a few words, before what failed (Codex, Python, Windows, Cline).
FAILURES_AFTER_A_PREFIX = [
    "apply_patch verification failed: Failed to find expected lines in /p/app.py",
    "PermissionError: [Errno 13] Permission denied: '/p/secret.py'",
    "The system cannot find the file specified. (os error 2)",
    "Access is denied. (os error 5)",
    "Tool execution failed: the file is locked by another process",
    "Edit failed: old_string not found in /p/app.py",
    "Traceback (most recent call last):",
]


@pytest.mark.parametrize("failure", FAILURES_AFTER_A_PREFIX)
@pytest.mark.parametrize("observation_type", ["file_read", "file_write"])
def test_a_failure_after_a_prefix_keeps_its_error(failure: str, observation_type: str) -> None:
    text = compress_extractive(
        function_name="edit" if observation_type == "file_write" else "read",
        observation_type=observation_type,
        args={"file_path": "/p/app.py"},
        result=f"{failure}\nmore detail",
    )
    assert f"Errors: {failure}" in text, text


def test_real_failed_edit_keeps_its_file_and_error_line() -> None:
    text = go_extract(FAILED_EDIT_CALL, "file_write")

    lines = text.splitlines()
    assert lines[:2] == [
        "Edit cmd/entire/cli/config.go",
        # The change it tried: small enough to show, not only count.
        'Diff: -return nil, fmt.Errorf("reading settings file: %w", err) | +return nil, err',
    ]
    # What failed, without the tool's advice to the model on how to call it again.
    assert lines[2] == (
        "Errors: <tool_use_error>Found 2 matches of the string to replace, "
        "but replace_all is false."
    )
    assert len(lines) == 3
    assert estimate_tokens(text) <= 55  # the call: ~140 tokens


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
    assert python.splitlines() == [
        "read_file src/discordbot/cogs/gen_reply.py",
        "Result: 531 lines | def get_tools(model: str) -> list[ToolParam]: | "
        "class RouteDecision(BaseModel): | class ReplyGeneratorCogs(commands.Cog):",
    ]
    assert markdown.splitlines()[1] == (
        "Result: 191 lines | # AI-Powered Discord Bot | ## Features | ### AI Chat"
    )
    assert estimate_tokens(python) <= 60
    assert estimate_tokens(markdown) <= 30


def test_real_write_keeps_the_kind_of_change_its_status_says_not_the_echoed_file() -> None:
    name, args, result = gemini_call(GEMINI_SESSION, "4o2js0r9")  # write_file GEMINI.md
    write = compress_extractive(
        function_name=name,
        observation_type="file_write",
        args=args,
        result=result,
        project_path="/home/wei/repo/discordbot",
    )
    elsewhere = compress_extractive(
        function_name=name, observation_type="file_write", args=args, result=result
    )
    edit = go_extract(LAST_EDIT_CALL, "file_write")

    # `Successfully overwrote file: /home/wei/repo/discordbot/GEMINI.md.`: the file is on the
    # first line already; what the status adds is that it worked, and how.
    assert write == "write_file GEMINI.md\nDiff: +76/-0 lines\nResult: overwrote"
    # Outside that project, the path the reply names is not the call's `GEMINI.md`: kept.
    assert elsewhere.splitlines()[-1] == "Result: overwrote /home/wei/repo/discordbot/GEMINI.md"
    # `The file cmd/entire/cli/config.go has been updated successfully.`
    assert edit.splitlines()[-1] == "Result: updated"


def test_real_write_that_did_not_happen_keeps_its_status_whole() -> None:
    name, args, result = tool_call(CLAUDE_MD_SESSION, DENIED_WRITE_CALL)

    text = compress_extractive(
        function_name=name,
        observation_type="file_write",
        args=args,
        result=result,
        project_path="/path/to/Demo",  # the transcript's cwd
    )

    # No error word, and no success either: the reader must learn the file was not written.
    assert text.splitlines()[-1] == (
        "Result: Claude requested permissions to write to CLAUDE.md, but you haven't granted "
        "it yet."
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
    # Gemini CLI wraps a command's empty output: `{"output": ""}` read as `Result: output: `.
    wrapped = raw_text(function_name="run_shell_command", args={}, result={"output": ""})
    assert wrapped == "run_shell_command\nResult: (empty)"


@pytest.mark.parametrize(
    ("result", "shown"),
    [
        ({"output": ""}, "Result: (empty)"),  # Gemini CLI's wrapped empty output
        ({"stdout": " ", "stderr": ""}, "Result: (empty)"),
        ({"stdout": "", "exitCode": 1}, 'Result: {"exitCode": 1, "stdout": ""}'),  # says more
    ],
)
def test_a_structured_result_holding_only_empty_text_is_empty(result: object, shown: str) -> None:
    text = compress_extractive(
        function_name="run_shell_command",
        observation_type="code_execution",
        args={"command": "find . -name '*.orig'"},
        result=result,
    )

    assert text.splitlines()[-1] == shown


def test_real_reply_that_repeats_the_arguments_under_labels_says_each_once() -> None:
    name, args, result = gemini_call(GEMINI_SESSION, "b5qo7ls5")  # update_topic, 3 arguments

    text = compress_extractive(
        function_name=name, observation_type="other", args=args, result=result
    )

    # `Topic summary: <summary>` and `Strategic Intent: <intent>` echo the arguments the tool's
    # line shows; `Current topic: "<title>"` echoes the third, shown with them: the reply said
    # nothing else. The summary, 95 tokens of Chinese, is cut at 40 like a line of English.
    intent, summary, title = args.values()
    shown = truncate_to_tokens(summary, 40)
    assert text == f"update_topic {intent} · {shown} · {title}"
    assert summary.startswith(shown.removesuffix("…"))
    assert "Topic summary:" not in text
    whole = raw_text(function_name=name, args=args, result=result)
    assert estimate_tokens(text) < 0.6 * estimate_tokens(whole)


def test_real_edit_shows_its_changed_lines_and_a_large_write_only_their_count() -> None:
    edit = go_extract(LAST_EDIT_CALL, "file_write")
    name, args, result = gemini_call(GEMINI_SESSION, "4o2js0r9")  # write_file, 76 new lines
    write = compress_extractive(
        function_name=name, observation_type="file_write", args=args, result=result
    )

    # Seven lines replaced by seven, of which one differs: that line, before and after (which
    # say the count too).
    assert edit.splitlines()[1] == 'Diff: -return nil, err | +return nil, fmt.Errorf("%w", err)'
    assert (
        estimate_tokens(edit) <= 50 < estimate_tokens(str(tool_call(GO_SESSION, LAST_EDIT_CALL)[1]))
    )
    assert write.splitlines()[1] == "Diff: +76/-0 lines"


def test_small_edit_that_adds_a_blank_line_keeps_the_count_its_shown_lines_do_not_say() -> None:
    text = compress_extractive(
        function_name="Edit",
        observation_type="file_write",
        args={"file_path": "a.py", "old_string": "a = 1\nb = 2", "new_string": "a = 1\n\nb = 3"},
        result="The file a.py has been updated successfully.",
    )

    assert text.splitlines()[1] == "Diff: +2/-1 lines: -b = 2 | +b = 3"


def test_search_in_a_folder_keeps_its_pattern() -> None:
    # Gemini CLI's search_file_content names the folder it searched and what it looked for.
    text = compress_extractive(
        function_name="search_file_content",
        observation_type="search",
        args={"pattern": "settings file|config", "path": "cmd/entire/cli", "include": "*.go"},
        result="cmd/entire/cli/config.go:84: return nil, fmt.Errorf(...)",
    )

    # A pattern's `|` is the pattern's: the arguments are joined by ` · `.
    assert text.splitlines()[:2] == [
        "search_file_content cmd/entire/cli",
        "Args: settings file|config · *.go",
    ]


def test_call_without_a_file_has_its_arguments_on_the_tool_line() -> None:
    # Claude Code's Glob of a file that is not there: 10 tokens as the call's JSON.
    text = compress_extractive(
        function_name="Glob",
        observation_type="search",
        args={"pattern": "package.json"},
        result="No files found",
    )

    assert text == "Glob package.json\nResult: No files found"


def test_real_search_with_context_keeps_its_matches_naming_their_file_once() -> None:
    text = go_extract(GREP_CALL, "search")

    # The two places the string is (why the next Edit found 2 matches), not the first three
    # lines of context (`config.go-81- // Load base settings`).
    match = 'return nil, fmt.Errorf("reading settings file: %w", err)'
    assert text.splitlines()[-1] == f"Result: cmd/entire/cli/config.go:84,239: {match}"


def test_search_without_context_names_a_file_once_in_a_row() -> None:
    text = compress_extractive(
        function_name="grep",
        observation_type="search",
        args={"pattern": "TTL"},
        result="a/b.py:3:TTL = 60\na/b.py:9:print(TTL)\nc.py:1:from a.b import TTL",
    )
    again = compress_extractive(
        function_name="grep",
        observation_type="search",
        args={"pattern": "TTL"},
        result="a.py:3:print(TTL)\na.py:5:x = TTL\nb.py:2:print(TTL)\nb.py:4:print(TTL)",
    )

    assert text.splitlines()[-1] == (
        "Result: a/b.py:3: TTL = 60 | :9: print(TTL) | c.py:1: from a.b import TTL"
    )
    # Only the same line next to itself in one file is merged: not across another line or file.
    assert again.splitlines()[-1] == (
        "Result: a.py:3: print(TTL) | :5: x = TTL | b.py:2,4: print(TTL)"
    )


def test_real_todo_list_keeps_every_item_and_its_state() -> None:
    name, args, result = tool_call(CLAUDE_MD_SESSION, TODO_CALL)

    text = compress_extractive(
        function_name=name, observation_type="other", args=args, result=result
    )

    assert text == (
        "TodoWrite\n"
        "Todos: [x] Analyze codebase structure and files; [x] Identify build, test, and lint "
        "commands; [x] Understand high-level architecture; [x] Check for existing CLAUDE.md, "
        "README.md, or rule files; [~] Create CLAUDE.md with essential information"
    )


def test_to_do_list_keeps_a_reply_that_is_not_a_plain_success() -> None:
    args = {"todos": [{"content": "Ship the fix", "status": "pending"}]}
    refused = "Todo list rejected: more than one item is in progress."

    text = compress_extractive(
        function_name="write_todos", observation_type="other", args=args, result=refused
    )
    plain = compress_extractive(
        function_name="write_todos",
        observation_type="other",
        args=args,
        result="Successfully updated the todo list.",
    )

    assert text == f"write_todos\nTodos: [ ] Ship the fix\nResult: {refused}"
    assert plain == "write_todos\nTodos: [ ] Ship the fix"


def test_summary_names_the_file_of_a_write_whose_result_is_its_status() -> None:
    observations = [
        digest("Read", "file_read", "Read a.go\nResult: lines 1-9 | func f() {", ["/p/a.go"]),
        digest("Edit", "file_write", "Edit a.go\nDiff: +1/-1 lines\nResult: updated", ["/p/a.go"]),
    ]

    summary = summarize_extractive(project_path="/p", user_prompt=None, observations=observations)

    assert "Notable results: Read a.go: lines 1-9 | func f() {; Edit a.go: updated." in summary


def test_summary_highlights_a_raw_observation_by_its_last_line_with_words() -> None:
    raw = 'Tool: read_file\nResult:\n{\n "content": "export const TTL = 60;"\n}'
    observations = [digest("read_file", "file_read", raw, ["a.ts"])]

    summary = summarize_extractive(project_path="/p", user_prompt=None, observations=observations)

    assert 'Notable results: "content": "export const TTL = 60;".' in summary
    assert "}." not in summary


def test_real_command_that_printed_nothing_says_so() -> None:
    # `find … | head -20` in an empty folder: its result is the empty string.
    name, args, result = tool_calls(CLAUDE_MD_SESSION)[1]
    assert result == ""

    text = compress_extractive(
        function_name=name, observation_type="code_execution", args=args, result=result
    )

    assert text.splitlines()[-1] == "Result: (empty)"
    assert estimate_tokens("\nResult: (empty)") <= 4
    # A result that came as JSON null is not an empty one, and neither is one that never came.
    null = compress_extractive(
        function_name="Bash", observation_type="code_execution", args={"command": "ls"}, result=None
    )
    assert null.splitlines()[-1] == "Result: none"


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("code_execution", {"command": "pytest -x tests/api"}),
        ("file_read", {"file_path": "src/app.py"}),
        ("file_write", {"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}),
        ("other", {"todos": [{"content": "Run the tests", "status": "in_progress"}]}),
    ],
)
def test_a_call_whose_result_never_came_says_none_was_recorded(
    kind: str, args: dict[str, object]
) -> None:
    extract = compress_extractive(
        function_name="tool", observation_type=kind, args=args, result=None, result_missing=True
    )
    whole = raw_text(function_name="tool", args=args, result=None, result_missing=True)

    assert extract.splitlines()[-1] == whole.splitlines()[-1] == "Result: (none recorded)"
    assert extract.count("Result:") == 1
    assert (
        whole == f"tool\nArgs: {json.dumps(args, separators=(',', ':'))}\nResult: (none recorded)"
    )


def test_a_summary_names_the_calls_that_had_no_result() -> None:
    answered = digest("Bash", "code_execution", "Bash npm ci\nResult: added 312 packages", [])
    unanswered = [
        ObservationDigest(
            function_name="Bash",
            observation_type="code_execution",
            status="compressed",
            compressed=f"Bash pytest -k case{n}\nResult: (none recorded)",
            files=[],
            result_missing=True,
        )
        for n in range(5)
    ]

    one = summarize_extractive(
        project_path="/p", user_prompt=None, observations=[answered, unanswered[0]]
    )
    five = summarize_extractive(
        project_path="/p", user_prompt=None, observations=[answered, *unanswered]
    )

    assert one == (
        "This session in /p made 2 tool calls (2 commands). Notable results: Bash npm ci: added "
        "312 packages. 1 call had no result recorded: Bash pytest -k case0."
    )
    assert five.endswith(
        "5 calls had no result recorded: Bash pytest -k case0; Bash pytest -k case1; "
        "Bash pytest -k case2 and 2 more."
    )


def test_empty_read_and_write_replies_say_so_too() -> None:
    for kind, args in (("file_read", {"path": "empty.txt"}), ("file_write", {"path": "a.txt"})):
        text = compress_extractive(
            function_name="tool", observation_type=kind, args=args, result="  \n"
        )
        assert text == f"tool {args['path']}\nResult: (empty)", kind


def test_a_command_holding_a_pipe_is_not_split_from_its_description() -> None:
    text = compress_extractive(
        function_name="Bash",
        observation_type="code_execution",
        args={"command": "ps aux | grep uvicorn | wc -l", "description": "Count servers"},
        result="2",
    )

    head = text.splitlines()[0]
    assert head == "Bash ps aux | grep uvicorn | wc -l · Count servers"
    # One argument joined to the next costs what ` | ` cost.
    assert estimate_tokens(head) == estimate_tokens(head.replace(" · ", " | "))


def test_reply_echoing_an_argument_shows_it_with_the_others_and_keeps_what_else_it_said() -> None:
    args = {"state": "busy", "note": "deploying v2", "owner": "ana"}

    echo = compress_extractive(
        function_name="set_status", observation_type="other", args=args, result="Owner: ana"
    )
    more = compress_extractive(
        function_name="set_status",
        observation_type="other",
        args=args,
        result="Owner: ana\nQueued behind 2 deploys",
    )

    assert echo == "set_status busy · deploying v2 · ana"
    assert more == "set_status busy · deploying v2 · ana\nResult: Queued behind 2 deploys"


@pytest.mark.parametrize(
    ("command", "entities", "mentions"),
    [
        # A name inside another is left out, in either order...
        (
            "make check",
            {"errors": ["KeyError"], "files": ["app.py", "src/pkg/app.py", "db.py", "x/db.py"]},
            "Mentions: KeyError, src/pkg/app.py, x/db.py",
        ),
        # ...at a path boundary only: `utils.py` and `a.py` are other files than `test_utils.py`
        # and `data.py` (and the command names `test_utils.py`, not `utils.py`).
        (
            "pytest test_utils.py",
            {"files": ["test_utils.py", "utils.py", "data.py", "a.py", "src/a.py"]},
            "Mentions: utils.py, data.py, src/a.py",
        ),
    ],
    ids=["inside another", "path boundary"],
)
def test_mentions_leave_out_a_name_another_holds_whole(
    command: str, entities: dict[str, list[str]], mentions: str
) -> None:
    text = compress_extractive(
        function_name="Bash",
        observation_type="code_execution",
        args={"command": command},
        result="done",
        entities=entities,
    )

    assert text.splitlines()[1] == mentions


def test_long_error_line_keeps_its_first_sentence_a_short_one_its_hint() -> None:
    advice = (
        "Run `npm install` in the folder that holds package.json, then try the build again. " * 2
    )
    long = f"error: module 'left-pad' could not be resolved from src/index.ts. {advice}"
    short = "error TS2304: Cannot find name 'lenght'. Did you mean 'length'?"

    text = compress_extractive(
        function_name="Bash",
        observation_type="code_execution",
        args={"command": "npm run build"},
        result=f"{long}\n{short}",
    )

    assert text.splitlines()[1] == (
        "Errors: error: module 'left-pad' could not be resolved from src/index.ts. | " + short
    )


def test_edit_shows_the_purpose_it_states_beside_its_diff() -> None:
    args = {
        "file_path": "app/db.py",
        "instruction": "Retry the connect once: the pool drops idle sockets",
        "old_string": "conn = connect()",
        "new_string": "conn = connect_with_retry(attempts=2)",
        "expected_replacements": 1,
    }

    text = compress_extractive(
        function_name="replace",
        observation_type="file_write",
        args=args,
        result="Successfully modified file: app/db.py (1 replacements).",
    )

    assert text.splitlines() == [
        "replace app/db.py",
        "Args: Retry the connect once: the pool drops idle sockets",
        "Diff: -conn = connect() | +conn = connect_with_retry(attempts=2)",
        "Result: modified",
    ]


def test_changed_lines_and_to_do_items_are_cut_at_the_same_tokens_in_any_script() -> None:
    chinese = "所有指令都必須透過虛擬環境執行以避免依賴套件的衝突或環境問題" * 2  # 60 ideographs
    english = "every command runs through the virtual environment to avoid conflicts " * 2
    for line in (chinese, english):
        text = compress_extractive(
            function_name="Edit",
            observation_type="file_write",
            args={"file_path": "README.md", "old_string": "x", "new_string": line},
            result="The file README.md has been updated successfully.",
        )
        todo = compress_extractive(
            function_name="write_todos",
            observation_type="other",
            args={"todos": [{"description": line, "status": "pending"}]},
            result="ok",
        )
        shown = text.splitlines()[1].removeprefix("Diff: -x | +")
        item = todo.splitlines()[1].removeprefix("Todos: [ ] ")
        assert shown == item
        assert shown.endswith("…")
        assert line.startswith(shown[:-1])
        assert 15 <= estimate_tokens(shown) <= 20, line


def test_a_line_is_cut_at_the_same_tokens_in_any_script() -> None:
    chinese = "我會先閱讀設定檔與測試，找出連線逾時的原因，再修正重試邏輯並補上測試。" * 3  # 105
    english = "I will read the settings and the tests, find why the connection times out. " * 3
    for note in (chinese, english):
        text = compress_extractive(
            function_name="update_topic",
            observation_type="other",
            args={"title": "Fix the timeout", "summary": note},
            result="ok",
        )
        head = text.splitlines()[0]
        shown = head.removeprefix("update_topic Fix the timeout · ")
        assert shown.endswith("…")
        assert note.startswith(shown.removesuffix("…"))
        assert 30 <= estimate_tokens(shown) <= 40, note


def test_a_read_cut_by_capture_is_not_counted_as_the_whole_file() -> None:
    # A 1 MB log of 174,762 lines, cut by capture to its head and tail: the extract said
    # `Result: 2716 lines`, a wrong fact about the file for every later session.
    whole = "x = 1\n" * 174_762
    cut = cap_text(whole, 16_384)
    text = compress_extractive(
        function_name="read_file",
        observation_type="file_read",
        args={"path": "build/out.py"},
        result={"output": cut},
        project_path="/p",
    )

    # Its head's 1,809 whole lines and a partial one, and its tail's 905.
    # The span says the cut, so its marker is no outline (the file has no wordier line).
    assert text.splitlines()[-1] == "Result: 2715 lines shown of 1,048,572 chars"


def test_a_session_without_tool_calls_says_so_in_words() -> None:
    summary = summarize_extractive(
        project_path="/p", user_prompt="explain the repo", observations=[]
    )

    assert summary == 'This session in /p on "explain the repo" made no tool calls.'
