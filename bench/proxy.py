"""The Gemini proxy's added latency: the same calls to a fake upstream, direct and through us.

Run: `uv run python -m bench.proxy [--calls N]`. It starts PostgreSQL (the test suite's choice:
TEST_DATABASE_URL, Docker or an embedded server), seeds a project with session summaries built
from the real memory files in /work/shared/testdata/memory-md, indexes and embeds them with the
local model, then serves the app with uvicorn on a free port. Each
round makes one direct call and one proxied call (memory injected, capture on) in alternating
order, so both see the same machine noise. The figure that matters is the added latency at p95.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from app.db import migrate
from app.db.engine import make_async_engine, make_sessionmaker
from app.index.embedding import embed_pending_chunks
from app.index.writer import replace_index_text
from app.llm.embeddings import local_embedder
from app.logs import configure_logging
from app.main import create_app
from tests.conftest import make_settings
from tests.postgres import choose_kind, create_database, start_server
from tests.proxy.live import live_server
from tests.proxy.upstream import fake_upstream

PROJECT = "/home/dev/bench-project"
BUDGET_MS = 30.0
MEMORY_MD = Path("/work/shared/testdata/memory-md")


def _paragraphs() -> list[str]:
    texts: list[str] = []
    for path in sorted(MEMORY_MD.glob("*.md")) if MEMORY_MD.is_dir() else []:
        texts += [p.strip() for p in path.read_text().split("\n\n") if len(p.strip()) > 40]
    # Without the shared test data, varied synthetic decisions stand in for it.
    return texts or [f"Decision {n}: auth/jwt.ts validates tokens, case {n}" for n in range(300)]


async def _seed(database_url: str, sessions: int) -> int:
    """Session summaries (indexed and embedded) for the bench project; returns index rows."""
    from sqlalchemy import text

    engine = make_async_engine(database_url, pool_size=2)
    maker = make_sessionmaker(engine)
    paragraphs = _paragraphs()
    async with maker() as session, session.begin():
        for n in range(sessions):
            summary = " ".join(paragraphs[(n * 3 + k) % len(paragraphs)] for k in range(3))
            await session.execute(
                text(
                    "INSERT INTO sessions (id, project_path, status, summary, user_prompt) "
                    "VALUES (:id, :p, 'summarized', :s, :u)"
                ),
                {"id": f"bench-{n}", "p": PROJECT, "s": summary[:4000], "u": f"task {n}"},
            )
            await replace_index_text(
                session,
                project_path=PROJECT,
                source="summary",
                texts=[summary[:4000]],
                session_id=f"bench-{n}",
            )
    embedded = 0
    embedder = local_embedder()
    while True:
        async with maker() as session, session.begin():
            stats = await embed_pending_chunks(session, embedder)
        if not stats.chunks:
            break
        embedded += stats.chunks
    await engine.dispose()
    return embedded


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _measure(
    proxy_url: str, upstream_url: str, prompts: list[str]
) -> tuple[list[float], list[float]]:
    """One direct and one proxied call per prompt, alternating which goes first."""
    headers = {"x-goog-api-key": "bench-key", "X-Agmem-Project": PROJECT}
    path = "/v1beta/models/gemini-2.5-flash:generateContent"
    direct: list[float] = []
    proxied: list[float] = []
    with httpx.Client(timeout=30) as client:
        for n, prompt in enumerate(prompts):
            body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}]}
            order = [(upstream_url, direct), (proxy_url, proxied)]
            for base, sink in order if n % 2 else reversed(order):
                started = time.perf_counter()
                client.post(base + path, json=body, headers=headers).raise_for_status()
                sink.append((time.perf_counter() - started) * 1000)
    return direct, proxied


def _report(label: str, direct: list[float], proxied: list[float]) -> None:
    d50, d95 = _percentile(direct, 0.5), _percentile(direct, 0.95)
    p50, p95 = _percentile(proxied, 0.5), _percentile(proxied, 0.95)
    added95 = p95 - d95
    print(f"{label} ({len(proxied)} calls each way)")
    print(f"  direct   p50 {d50:7.2f} ms  p95 {d95:7.2f} ms  mean {statistics.fmean(direct):7.2f}")
    print(f"  proxied  p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  mean {statistics.fmean(proxied):7.2f}")
    print(f"  added    p50 {p50 - d50:7.2f} ms  p95 {added95:7.2f} ms")
    print(
        f"  proxied/direct at p95 {p95 / d95:.2f}x; added p95 under {BUDGET_MS:.0f} ms: "
        f"{added95 < BUDGET_MS}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls each way per mode")
    parser.add_argument("--sessions", type=int, default=200, help="seeded session summaries")
    parser.add_argument(
        "--context-timeout-ms", type=int, default=None, help="AGMEM_PROXY_CONTEXT_TIMEOUT_MS"
    )
    args = parser.parse_args()
    configure_logging("warning")
    questions = [p.splitlines()[0][:200] for p in _paragraphs()]

    with start_server(choose_kind()) as server, tempfile.TemporaryDirectory() as home:
        database_url = create_database(server)
        migrate.upgrade(database_url)
        rows = asyncio.run(_seed(database_url, args.sessions))
        with fake_upstream() as upstream:
            overrides = (
                {"proxy_context_timeout_ms": args.context_timeout_ms}
                if args.context_timeout_ms
                else {}
            )
            settings = make_settings(home=Path(home), gemini_upstream=upstream.url, **overrides)
            app = create_app(settings, database_url=database_url)
            with live_server(app) as proxy_url:
                _measure(proxy_url, upstream.url, questions[:20])  # warm-up
                upstream.requests.clear()
                # An agent's tool loop: the user prompt stays the same turn after turn.
                loop = _measure(proxy_url, upstream.url, [questions[0]] * args.calls)
                # Every call a new prompt: the block is built (or late) each time.
                fresh = [f"{questions[n % len(questions)]} (#{n})" for n in range(args.calls)]
                varied = _measure(proxy_url, upstream.url, fresh)
            # Direct calls still carry X-Agmem-Project; the proxy strips it from what it forwards.
            forwarded = [r for r in upstream.requests if "x-agmem-project" not in r.headers]
            injected = sum("<memory>" in str(r.body.get("systemInstruction")) for r in forwarded)

    print(
        f"proxy bench: {rows} embedded memory rows, postgres {server.kind}, "
        f"context timeout {settings.proxy_context_timeout_ms} ms"
    )
    print(f"memory injected into {injected} of {len(forwarded)} proxied requests")
    _report("same prompt (agent tool loop)", *loop)
    _report("new prompt every call", *varied)


if __name__ == "__main__":
    main()
