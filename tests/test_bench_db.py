"""The benchmarks' throwaway database leaves no PostgreSQL running behind the run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from app.db.postmaster import alive

ROOT = Path(__file__).resolve().parent.parent

# Prints the postmaster's pid of the embedded server the benchmark database lives on.
RUN = textwrap.dedent(
    """
    from pathlib import Path
    import psycopg
    from bench.db import bench_database, libpq

    with bench_database() as url, psycopg.connect(libpq(url)) as connection:
        folder = connection.execute("SHOW data_directory").fetchone()[0]
        print((Path(folder) / "postmaster.pid").read_text().split()[0], flush=True)
    """
)


def test_the_embedded_server_is_stopped_when_the_benchmark_ends() -> None:
    environment = {k: v for k, v in os.environ.items() if k != "BENCH_DATABASE_URL"}
    run = subprocess.run(
        [sys.executable, "-c", RUN],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    postmaster = int(run.stdout.split()[-1])

    # Its folder was deleted before pgserver's stop at exit could find it: the server ran on,
    # orphaned, until its own lock-file check ended it up to a minute later.
    assert not alive(postmaster)
