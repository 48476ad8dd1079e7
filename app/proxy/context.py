"""The memory block the proxy injects, kept within the proxy's latency budget.

Building a block (a hybrid search plus a few queries) can take longer than the proxy may add to a
call, so blocks are cached per (project, prompt) for a short while. An agent's tool loop repeats
the same user prompt on every turn, so after the first turn the block is free. On a miss the build
gets `AGMEM_PROXY_CONTEXT_TIMEOUT_MS`; past that the call goes on with the project's most recent
block (or none), and the build finishes in the background for the next turn. When builds usually
take longer than that wait and the project has a recent block, the call does not wait at all. At
most one build per project runs at a time, so a burst of new prompts cannot pile up work.

A project with no recent build has nothing to fall back on: that is a conversation's first call
("where were we?"), the one that needs memory most, so it waits longer for its block
(`AGMEM_PROXY_FIRST_CONTEXT_TIMEOUT_MS`). Once per project per idle window, never in a tool loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

import structlog

from app.context.builder import build_context
from app.llm.embeddings import Embedder, get_embedder
from app.search.service import SearchTuning
from app.state import AppState

log = structlog.get_logger(__name__)

_MAX_ENTRIES = 512
_PROMPT_CHARS = 4000

_Key = tuple[str, int, str]


async def load_embedder(agmem: AppState) -> Embedder | None:
    """Load the embedder off the event loop, so the first proxied call does not pay for it.

    None when it cannot be loaded: the proxy then forwards without memory rather than keep the
    whole service from starting.
    """
    try:
        return await asyncio.to_thread(get_embedder, agmem.settings)
    except Exception as error:
        log.error(
            "proxy.memory_disabled", reason="embedder unavailable", error_type=type(error).__name__
        )
        return None


class MemoryBlocks:
    """`<memory>` blocks for (project, prompt), built by the context builder and cached briefly."""

    def __init__(self, agmem: AppState, embedder: Embedder | None) -> None:
        self.agmem = agmem
        self.embedder = embedder
        self.tuning = SearchTuning.from_settings(agmem.settings)
        self._cache: OrderedDict[_Key, tuple[float, str]] = OrderedDict()
        self._latest: dict[str, tuple[float, str]] = {}
        self._building: dict[str, tuple[_Key, asyncio.Task[str]]] = {}
        # A moving average of build times: whether waiting for a build is likely to pay off.
        self._typical_build_ms = 0.0

    async def block(self, project: str, prompt: str) -> str:
        """The block to inject now; "" when there is nothing (yet) worth injecting."""
        if self.embedder is None:
            return ""
        settings = self.agmem.settings
        # Search reads no further than this, and a pasted file must not bloat the cache keys.
        key = (project, settings.proxy_context_budget, prompt[:_PROMPT_CHARS])
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(key)
            return cached[1]
        building = self._building.get(project)
        if building is not None and building[0] != key:
            # One build per project at a time: a burst of new prompts must not pile builds onto
            # the event loop and slow every call; this one makes do with the latest block.
            return self._latest_block(project, now)
        if building is None:
            task = asyncio.create_task(self._build(key))
            self._building[project] = (key, task)
            task.add_done_callback(lambda done: self._finished(key, done))
        else:
            task = building[1]
        latest = self._latest_block(project, now)
        if latest and self._typical_build_ms > settings.proxy_context_timeout_ms:
            # Builds here usually outlast the wait, so waiting would only add latency: use the
            # project's latest block now; this prompt's own block serves its next turns.
            return latest
        known = self._latest.get(project, (0.0, ""))[0] > now
        wait_ms = (
            settings.proxy_context_timeout_ms if known else settings.proxy_first_context_timeout_ms
        )
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout=wait_ms / 1000)
        except TimeoutError:
            log.info("proxy.context_late", project=project)
        except Exception as error:
            # Memory is a bonus: without it the call still goes through, as if injection were off.
            log.warning("proxy.context_failed", project=project, error_type=type(error).__name__)
            return ""
        return self._latest_block(project, now)

    def _latest_block(self, project: str, now: float) -> str:
        latest = self._latest.get(project)
        return latest[1] if latest is not None and latest[0] > now else ""

    async def _build(self, key: _Key) -> str:
        project, budget, prompt = key
        assert self.embedder is not None  # `block` never starts a build without one
        started = time.monotonic()
        async with self.agmem.sessionmaker() as session, session.begin():
            built = await build_context(
                session,
                project_path=project,
                prompt=prompt or None,
                budget=budget,
                embedder=self.embedder,
                tuning=self.tuning,
                max_sessions=self.agmem.settings.context_sessions,
                min_similarity=self.agmem.settings.context_min_similarity,
            )
        elapsed_ms = (time.monotonic() - started) * 1000
        self._typical_build_ms += 0.2 * (elapsed_ms - self._typical_build_ms)
        # A block that only says "nothing remembered yet" costs tokens and tells the model nothing.
        return built.markdown.strip() if built.items else ""

    def _finished(self, key: _Key, task: asyncio.Task[str]) -> None:
        self._building.pop(key[0], None)
        if task.cancelled():
            return
        if task.exception() is not None:
            # A failed build (the database down) must not make every later call of the project
            # pay the first call's long wait: the project counts as known, with what it had.
            now = time.monotonic()
            if self._latest.get(key[0], (0.0, ""))[0] <= now:
                idle = self.agmem.settings.proxy_session_idle_seconds
                self._latest[key[0]] = (now + idle, "")
            return
        expires = time.monotonic() + self.agmem.settings.proxy_context_cache_seconds
        block = task.result()
        self._cache[key] = (expires, block)
        self._cache.move_to_end(key)
        while len(self._cache) > _MAX_ENTRIES:
            self._cache.popitem(last=False)
        # The latest block outlives the prompt cache: a new prompt minutes later still has it to
        # fall back on. An empty one is kept too: the project is known to have nothing yet.
        idle = self.agmem.settings.proxy_session_idle_seconds
        self._latest[key[0]] = (max(expires, time.monotonic() + idle), block)

    async def close(self) -> None:
        """Cancel builds still running at shutdown."""
        tasks = [task for _, task in self._building.values()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
