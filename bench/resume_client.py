"""The server's CPU per `POST /api/resume` whose briefing Gemini writes, two trees alternated.

Run: `uv run python -m bench.resume_client [--resumes 20] [--runs 3] [--against DIR]`
(DIR: another checkout, e.g. /work/notes27/bmain, or a venv).
A fake Gemini (tests/fakes/gemini.py) answers in a child process. Each run starts each tree's
`agmem serve --no-worker` (the order reversed every other run) on a bench database (bench/db.py)
holding a few memories, asks one resume to warm it (imports, first connections), then
`--resumes` more, and reads the server's CPU seconds from /proc before and after. It prints the
median CPU milliseconds per resume of each tree and the ratio this/other: what building a
google-genai client for each briefing cost the event loop.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bench.db import bench_database
from bench.startup import HERE, cpu_seconds, environment, free_port, post, venv_of

PROJECT = "/tmp/resume-bench-project"

FAKE = """
import sys
from http.server import ThreadingHTTPServer
from tests.fakes.gemini import FakeGemini, FakeResponse, _handler, text_answer
fake = FakeGemini()
fake.on(":generateContent", lambda _r: FakeResponse(body=text_answer("Auth refactor, 70%.")))
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), _handler(fake)).serve_forever(0.05)
"""


def serve(
    venv: Path, url: str, home: str, port: int, settings: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int]:
    """`venv`'s `agmem serve --no-worker` on `port`, once it answers /health."""
    env = environment(url, home) | settings
    command = [str(venv / "bin" / "agmem"), "serve", "--no-worker", "--port", str(port)]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return process, port
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    process.kill()
    raise SystemExit(f"{venv}: agmem serve did not start")


def cpu_per_resume(venv: Path, url: str, gemini: str, resumes: int, port: int) -> float:
    """Milliseconds of the server's CPU per resume briefed by Gemini."""
    with tempfile.TemporaryDirectory(prefix="resume-bench-home-") as home:
        keys = {"GEMINI_API_KEY": "bench", "AGMEM_GEMINI_BASE_URL": gemini}
        process, port = serve(venv, url, home, port, keys)
        try:
            asked = {"projectPath": PROJECT}
            if post(port, "/api/resume", asked).get("briefingBy") != "gemini":
                raise SystemExit(f"{venv}: the briefing was not Gemini's")
            before = cpu_seconds(process.pid)
            for _ in range(resumes):
                post(port, "/api/resume", asked)
            return (cpu_seconds(process.pid) - before) * 1000 / resumes
        finally:
            process.terminate()
            process.communicate(timeout=60)


def seed(venv: Path, url: str, project: str = PROJECT) -> None:
    with tempfile.TemporaryDirectory(prefix="resume-bench-home-") as home:
        env = environment(url, home)
        agmem = str(venv / "bin" / "agmem")
        for key, value in (("project.framework", "Next.js"), ("current.task", "auth")):
            memory = ["memory", "set", key, value, "-p", project]
            subprocess.run([agmem, *memory], env=env, check=True, capture_output=True)


def tree_options(parser: argparse.ArgumentParser) -> None:
    """The options of a bench that alternates this tree's server with another's."""
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout or venv (old code)")
    parser.add_argument("--ports", type=int, help="first of two free ports (default: any)")


def trees_of(options: argparse.Namespace) -> dict[str, Path]:
    return {"this": venv_of(HERE)} | (
        {"other": venv_of(options.against)} if options.against else {}
    )


def alternated(trees: dict[str, Path], runs: int) -> Iterator[str]:
    """The trees' names, run after run, the order reversed every other run."""
    for run in range(runs):
        yield from (list(trees) if run % 2 == 0 else list(reversed(trees)))


@contextlib.contextmanager
def fake_and_server_ports(options: argparse.Namespace, fake: str) -> Iterator[tuple[int, int]]:
    """The fake Gemini's port, running `fake` (a script given its port), and the server's."""
    fake_port, serve_port = (
        (options.ports, options.ports + 1) if options.ports else (free_port(), free_port())
    )
    process = subprocess.Popen([sys.executable, "-c", fake, str(fake_port)], cwd=HERE)
    try:
        yield fake_port, serve_port
    finally:
        process.terminate()
        process.wait(timeout=30)


def print_ratio(figures: dict[str, list[float]]) -> None:
    """This tree's median over the other's, when there is another."""
    if "other" in figures:
        ratio = statistics.median(figures["this"]) / statistics.median(figures["other"])
        print(f"this/other (medians): {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resumes", type=int, default=20)
    tree_options(parser)
    options = parser.parse_args()
    Path(PROJECT).mkdir(exist_ok=True)
    trees = trees_of(options)
    costs: dict[str, list[float]] = {name: [] for name in trees}
    with (
        fake_and_server_ports(options, FAKE) as (fake_port, serve_port),
        bench_database("agmem_bench_resume") as url,
    ):
        gemini = f"http://127.0.0.1:{fake_port}"
        seed(trees["this"], url)
        for name in alternated(trees, options.runs):
            cost = cpu_per_resume(trees[name], url, gemini, options.resumes, serve_port)
            costs[name].append(cost)
    for name, values in costs.items():
        runs = " ".join(f"{value:.1f}" for value in values)
        print(f"{name}: {statistics.median(values):.1f} ms CPU per resume (runs: {runs})")
    print_ratio(costs)


if __name__ == "__main__":
    main()
