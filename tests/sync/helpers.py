"""Builders for sync tests: a counting embedder over the real local model, a runner, and another
process's lease on a file."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
from numpy.typing import NDArray
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.db.engine import make_async_engine, make_sessionmaker
from app.llm.embeddings import Embedder, local_embedder
from app.sync.indexer import SyncRequest, sync_project
from app.sync.report import SyncReport

T = TypeVar("T")

TESTDATA = Path("/work/shared/testdata")
if not TESTDATA.exists():
    TESTDATA = Path(__file__).resolve().parents[3] / "shared" / "testdata"


class CountingEmbedder:
    """The real local model, counting the texts that reach it; `fail` makes it raise."""

    def __init__(self, inner: Embedder | None = None) -> None:
        self.inner = inner or local_embedder()
        self.texts_embedded = 0
        self.calls = 0
        self.fail = False

    @property
    def identity(self) -> str:
        return self.inner.identity

    @property
    def dims(self) -> int:
        return self.inner.dims

    def embed_documents(self, texts: list[str]) -> NDArray[np.float32]:
        if self.fail:
            raise RuntimeError("provider down")
        self.calls += 1
        self.texts_embedded += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> NDArray[np.float32]:
        return self.inner.embed_query(text)


def run_sync(
    database_url: str,
    settings: Settings,
    embedder: Embedder,
    project: Path,
    *,
    changed: list[Path] | None = None,
    **options: object,
) -> SyncReport:
    """One sync of `project`, inline, on its own engine (of the `changed` paths only, as the
    watch mode syncs them, when given)."""

    request = SyncRequest(project_path=str(project), **options)  # type: ignore[arg-type]
    paths = None if changed is None else [str(path) for path in changed]
    return on_engine(
        database_url,
        lambda sessionmaker: sync_project(sessionmaker, settings, embedder, request, changed=paths),
    )


def on_engine(
    database_url: str,
    work: Callable[[async_sessionmaker[AsyncSession]], Awaitable[T]],
    *,
    timeout: float | None = None,
) -> T:
    """`work` run inline on an engine of its own (disposed after), within `timeout` seconds."""

    async def go() -> T:
        engine = make_async_engine(database_url)
        try:
            return await asyncio.wait_for(work(make_sessionmaker(engine)), timeout)
        finally:
            await engine.dispose()

    return asyncio.run(go())


def make_project(root: Path) -> Path:
    """A project with real memory files and real transcripts from the shared test data."""
    (root / "memory" / "bank").mkdir(parents=True)
    (root / "sessions").mkdir()
    shutil.copy(TESTDATA / "memory-md" / "gemini-cli_GEMINI.md", root / "MEMORY.md")
    shutil.copy(TESTDATA / "memory-md" / "claude-code-viewer_CLAUDE.md", root / "memory" / "a.md")
    for name in ("nftbk_memory-bank_progress.md", "nftbk_memory-bank_systemPatterns.md"):
        shutil.copy(TESTDATA / "memory-md" / name, root / "memory" / "bank" / name)
    shutil.copy(
        TESTDATA / "claude-code" / "entire_c9883595c929_v2.0.74_small.jsonl",
        root / "sessions" / "small.jsonl",
    )
    shutil.copy(
        TESTDATA / "gemini" / "vct_gemini_session_legacy_json_2025-10.json",
        root / "sessions" / "legacy.json",
    )
    return root


# Another process (Samba, an NFS server, an editor using leases) holds a write lease on a file:
# the kernel makes an open for reading wait until it gives the lease up, or, O_NONBLOCK, fail at
# once with EWOULDBLOCK while the holder is told to give it up.
LEASE_HOLDER = """
import fcntl, os, signal, sys
signal.signal(signal.SIGIO, signal.SIG_IGN)  # told to give the lease up: it keeps it
descriptor = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.fcntl(descriptor, fcntl.F_SETLEASE, fcntl.F_WRLCK)
except OSError as error:
    print(f"no lease: {error.strerror}", flush=True)
    sys.exit(0)
print("held", flush=True)
sys.stdin.read()
"""


@contextmanager
def leased(path: Path) -> Iterator[None]:
    """`path` under another process's write lease, which it keeps when told to give it up, until
    the block ends (the test is skipped where the file system takes no lease)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", LEASE_HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    try:
        said = holder.stdout.readline().strip()
        if said != "held":
            pytest.skip(f"this file system takes no lease ({said})")
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
