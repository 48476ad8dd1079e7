"""The process that redacts the pass's huge rows: started without re-running its caller's script,
gone with the pass's process, the loop turning while it works, and its death a clear error."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psycopg

import app.redaction
from app.db.engine import make_async_engine, make_sessionmaker
from app.redaction import redact_stored
from tests.cli.helpers import AGMEM, agmem_env

SECRET = "password: hunter2"
ITEMS = 30_000  # ~1.2 MB of JSON text: a huge row


def _store(db: psycopg.Connection[Any], count: int) -> None:
    for n in range(count):
        value: list[Any] = [{"n": i, "note": "clean", "done": i % 2 == 0} for i in range(ITEMS)]
        value.insert(ITEMS // 2, {"note": f"\n{SECRET}\n"})
        db.execute(
            "INSERT INTO memories (scope, project_path, key, value, created_by) "
            "VALUES ('project', '/p', %s, %s, 'me')",
            (f"k{n:02}", json.dumps(value)),
        )
    row = db.execute("SELECT min(octet_length(value::text)) FROM memories").fetchone()
    assert row is not None
    assert row[0] > app.redaction.HUGE_ROW_BYTES


def _leaks(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM memories WHERE value::text LIKE '%hunter2%'").fetchone()
    return int(row[0]) if row else -1


def _script(tmp_path: Path, run: str) -> Path:
    """A script running a pass over the database named by its argument, `run` at its end."""
    path = tmp_path / "pass.py"
    path.write_text(textwrap.dedent(PASS) + run)
    return path


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except FileNotFoundError:
            continue
        for child in map(int, children):
            found += [child, *_descendants(child)]
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def _wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


PASS = """
    import asyncio, sys
    from app.db.engine import make_async_engine, make_sessionmaker
    from app.redaction import redact_stored

    async def go() -> None:
        engine = make_async_engine(sys.argv[1], pool_size=1)
        try:
            report = await redact_stored(make_sessionmaker(engine))
            print(report.summary_line(), flush=True)
        finally:
            await engine.dispose()
"""


def test_a_script_without_a_main_guard_runs_a_pass_to_its_end(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    # redact19's spawned worker re-ran such a script (it imports the caller's __main__): its
    # second pass waited on the first's row lock, the first on it, for ever.
    _store(db, 1)
    script = _script(tmp_path, "\nasyncio.run(go())\n")

    done = subprocess.run(
        [sys.executable, str(script), database_url],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("redacted 1 row")
    assert _leaks(db) == 0


def test_the_redacting_process_dies_with_a_killed_pass(
    db: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    _store(db, 10)
    script = _script(tmp_path, "\nif __name__ == '__main__':\n    asyncio.run(go())\n")
    owner = subprocess.Popen(
        [sys.executable, str(script), database_url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait_for(lambda: _descendants(owner.pid), 30), "no process was started"
        time.sleep(1.5)  # started (its imports done) and at work on a row
        children = _descendants(owner.pid)
        # SIGKILL, as the OOM killer does: the pass gets no chance to stop what it started.
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    finally:
        owner.kill()
        owner.wait()

    # A child killed before its prctl still exits, once its imports are done (slow when loaded).
    assert _wait_for(lambda: not any(map(_alive, children)), 60), [
        Path(f"/proc/{pid}/cmdline").read_text() for pid in children if _alive(pid)
    ]


def test_agmem_redact_says_in_one_line_that_its_redacting_process_was_killed(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    _store(db, 6)
    command = subprocess.Popen(
        [AGMEM, "redact"],
        env=agmem_env(DATABASE_URL=database_url),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def worker() -> list[int]:
            return [
                pid
                for pid in _descendants(command.pid)
                if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()
            ]

        assert _wait_for(worker, 60), "no process was started"
        os.kill(worker()[0], signal.SIGKILL)
        out, err = command.communicate(timeout=60)
    finally:
        command.kill()
        command.wait()

    assert command.returncode != 0
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "redacting a row over 256 KB was killed" in err, err
    assert out == ""


def test_the_loop_turns_while_a_huge_row_is_redacted(
    db: psycopg.Connection[Any], database_url: str
) -> None:
    # One huge row: its redaction (~1.2 MB of JSON parsed, walked, compared, serialized) is most
    # of the pass. Waited for without turning the loop, it was one gap of most of the pass.
    _store(db, 1)
    turns: list[float] = []

    async def go() -> float:
        engine = make_async_engine(database_url, pool_size=1)
        done = asyncio.Event()

        async def probe() -> None:
            while not done.is_set():
                turns.append(time.monotonic())
                await asyncio.sleep(0)

        probing = asyncio.create_task(probe())
        await asyncio.sleep(0)
        start = time.monotonic()
        try:
            report = await redact_stored(make_sessionmaker(engine))
            assert report.changed["memories"] == 1
            return time.monotonic() - start
        finally:
            done.set()
            await probing
            await engine.dispose()

    seconds = asyncio.run(go())

    longest = max(b - a for a, b in zip(turns, turns[1:], strict=False))
    assert longest < seconds / 4, (longest, seconds)
    assert _leaks(db) == 0
