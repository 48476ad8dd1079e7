"""What one sync did: the figures `sync_runs.stats`, the API and the CLI summary report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.index.embedding import EmbedStats
from app.sync.discover import Skip

# Progress callback: (phase, done, total).
Progress = Callable[[str, int, int], None]

MAX_REPORTED_SKIPS = 200


@dataclass(slots=True)
class SyncReport:
    files_scanned: int = 0
    files_changed: int = 0
    files_touched: int = 0  # mtime moved, content identical
    files_deleted: int = 0
    chunks_written: int = 0
    chunks_kept: int = 0  # rows of changed files left as they were (same text, same lines)
    chunks_reembedded: int = 0
    embeddings_computed: int = 0
    embeddings_cached: int = 0
    skipped: list[Skip] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # What the run did as asked but the user may want to act on (a folder to forget that held
    # nothing, files kept of a gone root): not a failure of the run, as an error is.
    warnings: list[str] = field(default_factory=list)
    # What transcript parsing passed over or trimmed, by kind ("invalid JSON", "image", ...).
    transcript_items: Counter[str] = field(default_factory=Counter)

    def add_embeddings(self, stats: EmbedStats) -> None:
        self.embeddings_computed += stats.computed
        self.embeddings_cached += stats.cached

    def stats(self) -> dict[str, Any]:
        """The run's figures as `sync_runs.stats` and the API carry them."""
        return {
            "filesScanned": self.files_scanned,
            "filesChanged": self.files_changed,
            "filesTouched": self.files_touched,
            "filesDeleted": self.files_deleted,
            "chunksWritten": self.chunks_written,
            "chunksKept": self.chunks_kept,
            "chunksReembedded": self.chunks_reembedded,
            "embeddingsComputed": self.embeddings_computed,
            "embeddingsCached": self.embeddings_cached,
            "transcriptItemsSkipped": dict(sorted(self.transcript_items.items())),
            "skipped": len(self.skipped),
            "skippedFiles": [
                {"path": s.path, "reason": s.reason} for s in self.skipped[:MAX_REPORTED_SKIPS]
            ],
            "warnings": self.warnings,
        }

    def summary_line(self) -> str:
        return (
            f"scanned {self.files_scanned} · changed {self.files_changed} · "
            f"deleted {self.files_deleted} · chunks {self.chunks_written} · "
            f"embedded {self.embeddings_computed} · cached {self.embeddings_cached} · "
            f"skipped {len(self.skipped)}"
        )
