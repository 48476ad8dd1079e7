"""Sync benchmark: `uv run python -m bench.sync [--md N] [--transcripts N] [--noop-files N]`.

`--watch-only` measures only the initial sync and the watch mode (for alternated runs of the
watch figure: the other steps take most of a run's time); its watch rounds edit the same files
as a whole run's with the same seed. `--watch-rounds N` takes the watch's median over N rounds.

Generates a corpus of markdown memory files and Claude-Code-shaped transcripts of mixed sizes,
then measures, with the local (wordllama) provider and a fresh embedding cache:
  1. the initial sync (time, chunks, chunks/s end to end: discovery, parsing, chunking,
     embedding, writing rows and their tsvector/GIN/HNSW index entries);
  2. a re-sync with nothing changed;
  3. a re-sync after rewriting 1% of the files, and its ratio to the initial sync: as a one-shot
     `agmem sync` runs it (new connections, every file listed), then as `agmem sync --watch` runs
     a burst's sync (connections kept from its first sync, only the edited files looked at);
  4. a no-change re-sync of a second project of `--noop-files` small files.
Uses DATABASE_URL when set (rows are removed afterwards), else a throwaway embedded PostgreSQL,
whose CPU time (from /proc) is then reported with this process's for the initial sync: with both
per chunk, the rate two fully used cores could reach is the work divided by two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, urlparse

from sqlalchemy import text

from app.config import load_settings
from app.db import migrate
from app.db.embedded import start_embedded_postgres
from app.db.engine import make_async_engine, make_sessionmaker
from app.heap import freeze_heap
from app.llm.embeddings import local_embedder
from app.logs import configure_logging
from app.sync.connections import SyncConnections
from app.sync.indexer import SyncRequest, sync_project
from app.sync.report import SyncReport
from app.sync.writer import WRITERS
from bench.scratch import scratch_folder

WORDS = (
    "token auth session cache index chunk vector query deploy build test lint schema migrate "
    "worker queue retry backoff config settings project memory search hybrid rank fusion jwt "
    "validate parse render route handler service repository model embedding provider batch "
    "the a of to and in is for on with that this it as be by are from at or an was"
).split()


def sentence(rng: random.Random, low: int = 8, high: int = 24) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
    words.append(f"{rng.choice(WORDS)}{rng.randint(0, 10**9)}")  # keeps texts distinct
    return " ".join(words).capitalize() + "."


def markdown(rng: random.Random, sections: int) -> str:
    parts = [f"# Notes {rng.randint(0, 10**9)}\n"]
    for n in range(sections):
        parts.append(f"\n## Section {n}\n\n")
        parts.append(" ".join(sentence(rng) for _ in range(rng.randint(3, 8))) + "\n")
        if rng.random() < 0.3:
            code = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(rng.randint(2, 6)))
            parts.append(f"\n```python\n{code}\n```\n")
        if rng.random() < 0.2:
            rows = "".join(f"| {rng.choice(WORDS)} | {rng.randint(0, 99)} |\n" for _ in range(5))
            parts.append(f"\n| key | value |\n|---|---|\n{rows}")
    return "".join(parts)


def transcript(rng: random.Random, turns: int) -> str:
    lines = [json.dumps({"type": "summary", "summary": sentence(rng), "leafUuid": "x"})]
    for n in range(turns):
        lines.append(
            json.dumps(
                {"type": "user", "message": {"role": "user", "content": sentence(rng, 10, 40)}}
            )
        )
        blocks: list[dict[str, object]] = [{"type": "text", "text": sentence(rng, 20, 60)}]
        if n % 3 == 0:
            blocks.append(
                {"type": "tool_use", "id": f"t{n}", "name": "Bash", "input": {"command": "ls"}}
            )
        lines.append(
            json.dumps({"type": "assistant", "message": {"role": "assistant", "content": blocks}})
        )
        if n % 3 == 0:
            result = "\n".join(sentence(rng, 5, 10) for _ in range(5))
            lines.append(
                json.dumps(
                    {
                        "type": "user",
                        "message": {
                            "role": "user",
                            "content": [
                                {"type": "tool_result", "tool_use_id": f"t{n}", "content": result}
                            ],
                        },
                    }
                )
            )
        if n % 5 == 0:
            lines.append(json.dumps({"type": "progress", "data": {"n": n}}))
    return "\n".join(lines) + "\n"


def make_corpus(root: Path, *, md: int, transcripts: int, seed: int) -> list[Path]:
    rng = random.Random(seed)
    (root / "memory").mkdir(parents=True)
    (root / "sessions").mkdir()
    (root / "MEMORY.md").write_text(markdown(rng, 3))
    files = [root / "MEMORY.md"]
    for n in range(md):
        folder = root / "memory" / f"d{n % 20}"
        folder.mkdir(exist_ok=True)
        roll = rng.random()
        sections = 1 if roll < 0.6 else 4 if roll < 0.95 else 20
        path = folder / f"note{n}.md"
        path.write_text(markdown(rng, sections))
        files.append(path)
    for n in range(transcripts):
        path = root / "sessions" / f"session{n}.jsonl"
        path.write_text(transcript(rng, rng.choice((5, 20, 60))))
        files.append(path)
    return files


def make_small_files(root: Path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    for n in range(count):
        folder = root / "memory" / f"d{n % 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"n{n}.md").write_text(f"# {n}\n\n{sentence(rng)}\n")


@contextmanager
def database() -> Iterator[str]:
    url = os.environ.get("DATABASE_URL")
    if url:
        migrate.upgrade(url)
        yield url
        return
    with scratch_folder("agmem-bench-sync-pg-") as folder:
        url = start_embedded_postgres(folder / "pgdata")
        migrate.upgrade(url)
        yield url


def server_cpu(url: str) -> float | None:
    """CPU seconds the local server's processes have used (their exited children included), from
    /proc; None for a server this machine cannot see (a DATABASE_URL elsewhere, no /proc)."""
    try:
        pgdata = Path(parse_qs(urlparse(url).query)["host"][0])
        postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # a process that just exited
            pid = int(stat.parent.name)
            if pid == postmaster:  # utime, stime, cutime, cstime
                total += sum(int(f) for f in fields[11:15])
            elif int(fields[1]) == postmaster:  # a backend or worker: utime, stime
                total += int(fields[11]) + int(fields[12])
        return total / tick
    except (KeyError, OSError, ValueError, IndexError):
        return None


def _postmaster(url: str) -> int | None:
    try:
        pgdata = Path(parse_qs(urlparse(url).query)["host"][0])
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except (KeyError, OSError, ValueError, IndexError):
        return None


def _schedstat(paths: list[Path]) -> dict[Path, tuple[float, float]]:
    """Each task's seconds on a CPU and seconds runnable but waiting for one (the kernel's
    schedstat, in ns, not the 10 ms ticks of /proc/<pid>/stat); a task gone is left out."""
    found = {}
    for path in paths:
        try:
            fields = path.read_text().split()
        except OSError:
            continue
        found[path] = (int(fields[0]) / 1e9, int(fields[1]) / 1e9)
    return found


def _grown(
    before: dict[Path, tuple[float, float]], after: dict[Path, tuple[float, float]]
) -> tuple[float, float]:
    """CPU and wait seconds between two readings; a task new in `after` counts from zero (its
    whole life is between them)."""
    ran = waited = 0.0
    for path, (cpu, wait) in after.items():
        cpu_before, wait_before = before.get(path, (0.0, 0.0))
        ran += cpu - cpu_before
        waited += wait - wait_before
    return ran, waited


def server_tasks(postmaster: int | None) -> list[Path]:
    """The schedstat files of the local server's processes (single-threaded each)."""
    if postmaster is None:
        return []
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == postmaster or int(stat.parent.name) == postmaster:
            found.append(stat.parent / "schedstat")
    return found


def background(tasks: list[Path]) -> list[Path]:
    """Those of the server's `tasks` that serve no connection (autovacuum, the WAL writer, the
    checkpointer, the postmaster), by their process titles: a client backend's names its client
    (`[local]`, or `host(port)`)."""
    found = []
    for task in tasks:
        try:
            title = (task.parent / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "[local]" not in title and re.search(r"\(\d+\)", title) is None:
            found.append(task)
    return found


class Round(NamedTuple):
    """One watch round: its wall time and report; CPU seconds of this process and of the
    server's processes; seconds their tasks spent runnable but waiting for a CPU, summed (the
    load beside the bench, and the two sides taking turns on a busy machine)."""

    seconds: float
    report: SyncReport
    python: float
    server: float | None
    waited: float
    background: float | None  # of `server`, the processes serving no connection


async def timed_sync(
    url: str,
    project: Path,
    *,
    connections: SyncConnections | None = None,
    changed: list[Path] | None = None,
) -> tuple[float, SyncReport]:
    """One sync on a fresh engine, as a one-shot `agmem sync` runs it; with `connections` kept
    from an earlier sync and the `changed` paths, as `agmem sync --watch` runs a burst's sync."""
    settings = load_settings(_env_file=None)
    engine = make_async_engine(url, pool_size=2)
    try:
        started = time.perf_counter()
        report = await sync_project(
            make_sessionmaker(engine),
            settings,
            local_embedder(),
            SyncRequest(project_path=str(project)),
            connections=connections,
            changed=None if changed is None else [str(path) for path in changed],
        )
        return time.perf_counter() - started, report
    finally:
        await engine.dispose()


def edit_some(files: list[Path], rng: random.Random) -> list[Path]:
    """Append a line to 1% of the files (at least one)."""
    touched = rng.sample(files, max(1, len(files) // 100))
    for path in touched:
        with path.open("a") as handle:
            handle.write(f"\nedited {rng.randint(0, 10**9)}\n")
    return touched


async def watch_rounds(
    url: str, project: Path, files: list[Path], rng: random.Random, rounds: int
) -> list[Round]:
    """The 1% re-sync as the watch mode runs it, `rounds` times: the connections kept since the
    watch's first (whole) sync, and only the files its events named looked at."""
    connections = SyncConnections(url, keep=WRITERS)
    postmaster = _postmaster(url)
    own = Path("/proc/self/task")
    try:
        await timed_sync(url, project, connections=connections)  # the watch's first sync
        results = []
        for _ in range(rounds):
            touched = edit_some(files, rng)
            server = server_tasks(postmaster)  # the kept connections' backends among them
            server_before = _schedstat(server)
            python_before = _schedstat(list(own.glob("*/schedstat")))
            cpu = time.process_time()
            seconds, report = await timed_sync(
                url, project, connections=connections, changed=touched
            )
            python = time.process_time() - cpu
            server += [p for p in server_tasks(postmaster) if p not in server]
            server_after = _schedstat(server)
            used, server_waited = _grown(server_before, server_after)
            _, python_waited = _grown(python_before, _schedstat(list(own.glob("*/schedstat"))))
            quiet = set(background(server))
            aside, _ = _grown(server_before, {p: v for p, v in server_after.items() if p in quiet})
            results.append(
                Round(
                    seconds,
                    report,
                    python,
                    used if postmaster is not None else None,
                    server_waited + python_waited,
                    aside if postmaster is not None else None,
                )
            )
        return results
    finally:
        await connections.close()


def watch_figures(watched: list[Round]) -> str:
    """Each round in order, and the medians of its CPU and of its wait for a CPU: on a shared
    machine the wall time moves with the others' load, and these say how much of it was work."""

    def ms(values: list[float]) -> str:
        return " ".join(f"{value * 1000:.1f}" for value in values)

    def median_ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.1f} ms"

    pad = f"{'':<28} "
    lines = [
        f"{pad}rounds in order: {ms([r.seconds for r in watched])} ms",
        f"{pad}python CPU: {ms([r.python for r in watched])} ms",
    ]
    cpu = [r.python + r.server for r in watched if r.server is not None]
    if len(cpu) == len(watched):
        lines.append(f"{pad}postgres CPU: {ms([r.server or 0.0 for r in watched])} ms")
        lines.append(
            f"{pad}  of it no connection's (autovacuum, WAL writer, checkpointer): "
            f"{ms([r.background or 0.0 for r in watched])} ms"
        )
        lines.append(f"{pad}waiting for a CPU (tasks summed): {ms([r.waited for r in watched])} ms")
        lines.append(
            f"{pad}medians: CPU a round (python + postgres) {median_ms(cpu)}, "
            f"waiting for a CPU {median_ms([r.waited for r in watched])}"
        )
    return "\n".join(lines)


async def forget(url: str, projects: list[Path]) -> None:
    engine = make_async_engine(url, pool_size=1)
    try:
        async with engine.begin() as connection:
            for project in projects:
                await connection.execute(
                    text("DELETE FROM memory_files WHERE project_path = :p"), {"p": str(project)}
                )
    finally:
        await engine.dispose()


def line(label: str, seconds: float, report: SyncReport) -> str:
    return f"{label:<28} {seconds:8.3f} s   {report.summary_line()}"


async def main(args: argparse.Namespace) -> None:
    configure_logging("warning")  # the figures only, not every server start and sync
    local_embedder()  # load the model before timing
    freeze_heap()  # as `agmem sync` does once the model is loaded
    seed = args.seed if args.seed is not None else int(time.time())
    with scratch_folder("agmem-bench-sync-") as work:
        project, small = work / "project", work / "small"
        files = make_corpus(project, md=args.md, transcripts=args.transcripts, seed=seed)
        if not args.watch_only:
            make_small_files(small, args.noop_files, seed + 1)
        with database() as url:
            try:
                server_before, python_before = server_cpu(url), time.process_time()
                initial, first = await timed_sync(url, project)
                python = time.process_time() - python_before
                await asyncio.sleep(0.2)  # the server reaps the run's backends
                server_after = server_cpu(url)
                print(line("initial sync", initial, first))
                rate = first.chunks_written / initial
                print(f"{'':<28} {rate:8.0f} chunks/s (goal >= 2000: {rate / 2000:.2f}x)")
                per_chunk = 1000 / max(first.chunks_written, 1)
                cpu = f"CPU a chunk: python {python * per_chunk:.3f} ms"
                if server_before is not None and server_after is not None:
                    server = server_after - server_before
                    both = (python + server) * per_chunk
                    cpu += (
                        f", postgres {server * per_chunk:.3f} ms: two busy cores would give "
                        f"{2000 / both:.0f} chunks/s"
                    )
                print(f"{'':<28} {cpu}")
                rng = random.Random(seed + 2)
                if args.watch_only:
                    # The one-shot's edit still drawn, so the watch rounds edit the same files as
                    # a whole run's; the watch's first (whole) sync takes it in.
                    touched = edit_some(files, rng)
                else:
                    nothing, same = await timed_sync(url, project)
                    print(line("re-sync, nothing changed", nothing, same))
                    touched = edit_some(files, rng)
                    changed, one = await timed_sync(url, project)
                    print(line(f"re-sync, {len(touched)} files (1%) edited", changed, one))
                    print(f"{'':<28} {changed / initial:8.2%} of the initial sync time (goal ~1%)")
                watched = await watch_rounds(url, project, files, rng, args.watch_rounds)
                times = sorted(r.seconds for r in watched)
                median = statistics.median(times)
                print(line(f"watch mode, {len(touched)} files edited", median, watched[-1].report))
                print(
                    f"{'':<28} {median / initial:8.2%} of the initial sync time (goal ~1%; "
                    f"median of {len(times)}, {times[0] * 1000:.1f}-{times[-1] * 1000:.1f} ms)"
                )
                print(watch_figures(watched))
                if args.watch_only:
                    return
                await timed_sync(url, small)
                noop, idle = await timed_sync(url, small)
                print(line(f"re-sync of {args.noop_files} files, none changed", noop, idle))
                print(f"{'':<28} goal < 1 s: {noop:.3f} s ({1 / noop if noop else 0:.1f}x under)")
            finally:
                await forget(url, [project, small])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--md", type=int, default=2000)
    parser.add_argument("--transcripts", type=int, default=200)
    parser.add_argument("--noop-files", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--watch-rounds", type=int, default=5, help="1%% re-syncs as the watch mode runs them"
    )
    parser.add_argument(
        "--watch-only",
        action="store_true",
        help="the initial sync and the watch mode only (no one-shot re-syncs, no no-op project)",
    )
    asyncio.run(main(parser.parse_args()))
