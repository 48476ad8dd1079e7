"""The benchmarks' temporary folders go when a run ends, however it ends, their servers first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.db.postmaster import alive

ROOT = Path(__file__).resolve().parent.parent

# Prints the data folder and the postmaster's pid of the benchmark's server, then ends as told:
# "normal", "error", or "wait" (for the signal the test sends).
IN_A_BENCHMARK = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import psycopg
    from app.db.raw_pool import libpq_url
    {imports}

    with {opening} as url, psycopg.connect(libpq_url(url)) as connection:
        folder = Path(connection.execute("SHOW data_directory").fetchone()[0])
        pid = (folder / "postmaster.pid").read_text().split()[0]
        print(folder, pid, flush=True)
        if sys.argv[1] == "error":
            raise RuntimeError("the benchmark failed")
        if sys.argv[1] == "wait":
            time.sleep(60)
    """
)

BENCH_SYNC = {"imports": "from bench.sync import database", "opening": "database()"}
BENCH_SYNC_ROWS = {"imports": "from bench.sync_rows import database", "opening": "database()"}
SCRATCH = {
    "imports": textwrap.dedent(
        """
        import contextlib, subprocess
        from app.db.embedded import start_embedded_postgres
        from bench.scratch import scratch_folder

        @contextlib.contextmanager
        def database():
            with scratch_folder("agmem-bench-test-") as scratch:
                # The run's initialised data folder, copied: an initdb (~1 s of CPU) is no part
                # of what the folder's end is tested for.
                subprocess.run(["cp", "-a", sys.argv[2], str(scratch / "pgdata")], check=True)
                yield start_embedded_postgres(scratch / "pgdata")
        """
    ),
    "opening": "database()",
}


def run(
    script: dict[str, str], ending: str, *args: str
) -> tuple[Path, int, subprocess.CompletedProcess[str]]:
    code = IN_A_BENCHMARK.format(**script)
    environment = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    signalled = ending in ("SIGINT", "SIGTERM")
    process = subprocess.Popen(
        # Told to wait inside the block for the signal: sent to a child that goes on, it landed
        # anywhere in the block's own end or the interpreter's exit (rc 0, or a folder kept).
        [sys.executable, "-c", code, "wait" if signalled else ending, *args],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.communicate(timeout=120)[1]
    folder, pid = line.split()
    if signalled:
        process.send_signal(getattr(signal, ending))
    out, err = process.communicate(timeout=120)
    return (
        Path(folder),
        int(pid),
        subprocess.CompletedProcess(process.args, process.returncode, out, err),
    )


def gone(pid: int) -> bool:
    give_up = time.monotonic() + 5  # a stop's last backends
    while alive(pid) and time.monotonic() < give_up:
        time.sleep(0.05)
    return not alive(pid)


@pytest.mark.parametrize("script", [BENCH_SYNC, BENCH_SYNC_ROWS], ids=["sync", "sync_rows"])
def test_a_benchmarks_database_folder_goes_with_its_server_stopped_first(
    script: dict[str, str],
) -> None:
    # bench.sync and bench.sync_rows deleted the folder with its server running: the server
    # lived on (up to a minute, until its lock-file check), writing into the folder it had.
    pgdata, pid, done = run(script, "normal")
    assert done.returncode == 0, done.stderr
    assert gone(pid), "the benchmark's server runs on"
    assert not pgdata.parent.exists()


@pytest.fixture
def initialised_pgdata(_embedded_home_template: Path) -> Path:
    """The run's initialised, stopped data folder (tests/conftest.py), for SCRATCH to copy."""
    return _embedded_home_template / "pgdata"


@pytest.mark.parametrize("ending", ["error", "SIGINT", "SIGTERM"])
def test_a_scratch_folder_goes_however_the_benchmark_ends(
    ending: str, initialised_pgdata: Path
) -> None:
    pgdata, pid, done = run(SCRATCH, ending, str(initialised_pgdata))
    assert done.returncode != 0
    assert gone(pid), "the benchmark's server runs on"
    assert not pgdata.parent.exists(), done.stderr
    assert "could not remove" not in done.stderr
