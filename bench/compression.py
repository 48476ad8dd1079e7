"""Token compression of real tool calls by the offline extractive fallback, against the design's
95% target, with a guard on what the compressed text keeps.

    uv run python -m bench.compression

The tool calls of /work/shared/testdata's transcripts (bench/compression_replay.py) are replayed
as sessions through the HTTP API (session/start, observe, observe/result, session/end) on a fresh
embedded PostgreSQL; one worker without a Gemini key drains them (extractive compression, `raw`
under AGMEM_WORKER_MIN_COMPRESS_TOKENS, extractive summaries, local embeddings). Gemini's own
compression is not measured: it is unreachable here, and the fake's answers are canned.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.capture.entities import COMMAND_KEYS, FILE_KEYS
from app.config import Settings, load_settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.llm.embeddings import local_embedder
from app.logs import configure_logging
from app.main import create_app
from app.worker.loop import Worker
from bench.compression_replay import Replay, replays
from bench.db import bench_database

TARGET = 0.95
CONTEXT_BUDGET = 2000
GUARDED_KINDS = ("files", "errors", "commands")
SIZE_BANDS = ((1000, ">= 1,000 tokens"), (120, "120-999 tokens"), (0, "< 120 tokens"))


def _squash(text: str) -> str:
    return " ".join(text.split())


def survives(entity: str, text: str, project: str) -> bool:
    """Whether an entity capture found is in the compressed text: spacing aside, as JSON escapes
    it (a raw observation is kept as JSON), or a path relative to the observation's project."""
    squashed = _squash(text)
    escaped = entity.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    forms = [entity, escaped]
    root = project.rstrip("/") + "/"
    if entity.startswith(root) and len(entity) > len(root):
        forms.append(entity[len(root) :])
    return any(_squash(form) in squashed for form in forms)


def call_targets(args: Any) -> dict[str, list[str]]:
    """The files and commands a call names by its argument keys (capture's FILE_KEYS and
    COMMAND_KEYS), as opposed to those mentioned in a file's content or a result."""
    found: dict[str, list[str]] = {"files": [], "commands": []}
    stack: list[tuple[str, Any]] = [("", args)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((str(k).lower(), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((key, v) for v in value)
        elif isinstance(value, str) and value.strip():
            if key in FILE_KEYS and "\n" not in value:
                found["files"].append(value)
            elif key in COMMAND_KEYS:
                found["commands"].append(value.split("\n", 1)[0])
    return found


@dataclass(slots=True)
class Guard:
    """Entities kept in compressed texts, per kind, and the share kept per observation."""

    kept: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    found: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    shares: list[float] = field(default_factory=list)

    def add(self, entities: dict[str, list[str]], text: str, project: str) -> None:
        kept = found = 0
        for kind in GUARDED_KINDS:
            for value in entities.get(kind, []):
                found += 1
                self.found[kind] += 1
                if survives(value, text, project):
                    kept += 1
                    self.kept[kind] += 1
        if found:
            self.shares.append(kept / found)

    def __str__(self) -> str:
        found = sum(self.found.values())
        if not found:
            return "-"
        kept = sum(self.kept.values())
        mean = sum(self.shares) / len(self.shares)
        kinds = " ".join(f"{k[0]}{self.kept[k]}/{self.found[k]}" for k in GUARDED_KINDS)
        return f"{kept / found:4.0%} (obs {mean:4.0%}; {kinds})"


@dataclass(slots=True)
class Tally:
    observations: int = 0
    original: int = 0
    compressed: int = 0
    saved: int = 0  # the tokensSaved the service recorded (never below 0 an observation)
    targets: Guard = field(default_factory=Guard)  # the files and commands the call named
    entities: Guard = field(default_factory=Guard)  # all that capture found, results included

    def add(self, obs: dict[str, Any]) -> None:
        self.observations += 1
        self.original += obs["originalTokens"]
        self.compressed += obs["compressedTokens"]
        self.saved += obs["tokensSaved"]
        text = obs.get("compressedData") or ""
        self.targets.add(call_targets(obs["functionArgs"]), text, obs["projectPath"])
        self.entities.add(obs.get("entities") or {}, text, obs["projectPath"])

    @property
    def ratio(self) -> float:
        return 1 - self.compressed / self.original if self.original else 0.0


def _settings(home: Path) -> Settings:
    return load_settings(
        database_url=None,
        api_token=None,
        gemini_api_key=None,
        gemini_base_url=None,
        home=home,
        _env_file=None,
    )


def _replay(client: TestClient, replay: Replay) -> tuple[str, dict[str, int]]:
    """Replay one transcript's calls as a session; the observation ids with capture's estimate
    of each call's tokens (what `POST /api/observe/result` answered)."""
    started = client.post(
        "/api/session/start",
        json={"projectPath": replay.project_path, "userPrompt": replay.prompt},
    )
    assert started.status_code == 201, started.text
    session_id: str = started.json()["id"]
    ids: dict[str, int] = {}
    for call in replay.calls:
        observed = client.post(
            "/api/observe",
            json={
                "sessionId": session_id,
                "functionName": call.name,
                "functionArgs": call.args if call.args is not None else {},
                "id": call.id,  # the agent's own call id, as an interceptor sends it
            },
        )
        assert observed.status_code == 201, observed.text
        observation_id: str = observed.json()["id"]
        answered = client.post(
            "/api/observe/result",
            json={
                "sessionId": session_id,
                "functionName": call.name,
                "result": call.result,
                "observationId": observation_id,
            },
        )
        assert answered.status_code == 200, answered.text
        ids[observation_id] = answered.json()["originalTokens"]
    ended = client.post("/api/session/end", json={"sessionId": session_id})
    assert ended.status_code == 202, ended.text
    return session_id, ids


async def _drain(settings: Settings, url: str) -> None:
    engine = make_async_engine(url, pool_size=4)
    try:
        worker = Worker(
            settings=settings,
            sessionmaker=make_sessionmaker(engine),
            database_url=url,
            concurrency=2,
            embedder=local_embedder(),
        )
        await worker.drain()
    finally:
        await engine.dispose()


def _row(label: str, tally: Tally) -> str:
    return (
        f"  {label:<15}{tally.observations:>4} {tally.original:>8,} {tally.compressed:>6,} "
        f"{tally.saved:>8,} {tally.ratio:>6.1%} {tally.ratio / TARGET:>5.3f}"
        f"  {tally.targets!s:<33} {tally.entities}"
    )


def _context(client: TestClient, project: str, prompt: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"projectPath": project, "budget": CONTEXT_BUDGET, "format": "json"}
    if prompt:
        params["prompt"] = prompt
    answer = client.get("/api/context", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def report(
    client: TestClient, sessions: list[tuple[Replay, str, dict[str, int]]], *, show: bool = False
) -> None:
    """Print the compression figures, the raw share, the guard and the context blocks (with
    `show`, first every call's compressed text, to read what a later session would get)."""
    by_type: dict[str, Tally] = defaultdict(Tally)
    by_method: dict[str, Tally] = defaultdict(Tally)
    by_size: dict[str, Tally] = defaultdict(Tally)
    total = Tally()
    session_tokens: dict[str, int] = {}
    captured = 0
    for _, session_id, ids in sessions:
        session_tokens[session_id] = 0
        captured += sum(ids.values())
        for observation_id in ids:
            obs = client.get(f"/api/observations/{observation_id}").json()
            assert obs["status"] == "compressed", obs
            if show:
                print(
                    f"--- {obs['functionName']} ({obs['observationType']}, {obs['generatedBy']}): "
                    f"{obs['originalTokens']:,} -> {obs['compressedTokens']:,} tokens\n"
                    f"{obs['compressedData']}"
                )
                lost = [
                    value
                    for kind in GUARDED_KINDS
                    for value in (obs.get("entities") or {}).get(kind, [])
                    if not survives(value, obs["compressedData"], obs["projectPath"])
                ]
                if lost:
                    print(f"(entities not kept: {', '.join(lost)})")
            band = next(label for low, label in SIZE_BANDS if obs["originalTokens"] >= low)
            for tally in (
                total,
                by_type[obs["observationType"]],
                by_method[obs["generatedBy"]],
                by_size[band],
            ):
                tally.add(obs)
            session_tokens[session_id] += obs["originalTokens"]

    print(
        "What is measured: the offline extractive fallback (no GEMINI_API_KEY) and `raw` "
        "observations;\n"
        "not measured: Gemini's compression (unreachable here; the fake's answers are canned).\n"
        "Tokens are the service's one estimate (app/tokens.py: 4 characters a token, a wide "
        "character one).\n"
        "Kept: the share of capture's files (f), errors (e) and commands (c) found in the "
        "compressed text\n(overall; mean per observation): the call's targets (the files and "
        "commands its arguments\nname) and all the entities capture found, results included.\n"
    )
    header = (
        f"  {'':<15}{'obs':>4} {'original':>8} {'compr':>6} {'saved':>8} {'1-c/o':>6} "
        f"{'/95%':>5}  {'call targets kept':<33} all entities kept"
    )
    print("by observation type")
    print(header)
    for kind in sorted(by_type):
        print(_row(kind, by_type[kind]))
    print(_row("total", total))
    print(f"  target {TARGET:.0%}: {'met' if total.ratio >= TARGET else 'NOT met'}")
    print("\nby method (generatedBy)")
    print(header)
    for method in sorted(by_method):
        print(_row(method, by_method[method]))
    raw = by_method.get("raw", Tally())
    share = raw.original / total.original if total.original else 0.0
    print(
        f"  raw (under the minimum to compress): {raw.observations} of {total.observations} "
        f"observations, {raw.original:,} of {total.original:,} original tokens ({share:.1%})"
    )
    ceiling = 1 - raw.compressed / total.original if total.original else 0.0
    print(f"  ceiling with the raw ones kept whole (an extract of 0 tokens): {ceiling:.1%}")
    print(
        f"  capture's estimate of the same calls (POST /api/observe/result's originalTokens): "
        f"{captured:,} tokens; 1 - compressed/that = {1 - total.compressed / captured:.1%}"
    )
    print("\nby size of the call (originalTokens)")
    print(header)
    for _, band in SIZE_BANDS:
        if band in by_size:
            print(_row(band, by_size[band]))

    print(f"\ncontext blocks (GET /api/context, budget {CONTEXT_BUDGET})")
    for replay, session_id, ids in sessions:
        plain = _context(client, replay.project_path, None)
        asked = _context(client, replay.project_path, replay.prompt)
        raw_tokens = session_tokens[session_id]
        transcript = (replay.transcript_chars + 3) // 4
        print(
            f"  {replay.name}: {len(ids)} calls, {raw_tokens:,} tokens of tool calls, "
            f"transcript {transcript:,} tokens"
        )
        for label, block in (("no prompt", plain), ("prompt", asked)):
            tokens = block["tokenCount"]
            sources: dict[str, int] = defaultdict(int)
            for item in block["items"]:
                sources[item["source"]] += 1
            parts = ", ".join(f"{n} {s}" for s, n in sorted(sources.items()))
            print(
                f"    {label:<9}: {tokens:>5} tokens = {tokens / raw_tokens:6.1%} of the calls, "
                f"{tokens / transcript:6.1%} of the transcript ({parts})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--show", action="store_true", help="print every call's compressed text before the figures"
    )
    args = parser.parse_args()
    configure_logging("warning")
    started = time.perf_counter()
    local_embedder()  # loaded once, before the replay
    with tempfile.TemporaryDirectory(prefix="agmem-bench-home-") as home:
        settings = _settings(Path(home))
        with bench_database("agmem_bench_compression") as url:
            app = create_app(settings, database_url=url)
            with TestClient(
                app, base_url="http://127.0.0.1", raise_server_exceptions=False
            ) as client:
                sessions = []
                for replay in replays():
                    session_id, ids = _replay(client, replay)
                    sessions.append((replay, session_id, ids))
                asyncio.run(_drain(settings, url))
                report(client, sessions, show=args.show)
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
