from __future__ import annotations

import os
from pathlib import Path

from app.sync.discover import discover


def test_finds_root_memory_nested_memory_and_transcripts(tmp_path: Path) -> None:
    project = tmp_path / "p"
    (project / "memory" / "deep" / "er").mkdir(parents=True)
    (project / "sessions" / "sub").mkdir(parents=True)
    (project / "MEMORY.md").write_text("# m\n")
    (project / "notes.md").write_text("not memory\n")
    (project / "memory" / "a.md").write_text("a\n")
    (project / "memory" / "a.txt").write_text("not markdown\n")
    (project / "memory" / "deep" / "er" / "b.md").write_text("b\n")
    (project / "sessions" / "s.jsonl").write_text("{}\n")
    (project / "sessions" / "sub" / "legacy.json").write_text("{}\n")
    (project / "sessions" / "notes.md").write_text("not a transcript\n")

    found = discover(memory_root=project, sessions_root=project / "sessions", max_bytes=10_000)

    assert sorted(
        (Path(f.path).relative_to(project).as_posix(), f.source) for f in found.files
    ) == [
        ("MEMORY.md", "memory"),
        ("memory/a.md", "memory"),
        ("memory/deep/er/b.md", "memory"),
        ("sessions/s.jsonl", "sessions"),
        ("sessions/sub/legacy.json", "sessions"),
    ]
    assert found.skipped == []
    first = next(f for f in found.files if f.path.endswith("MEMORY.md"))
    assert first.size == 4
    assert first.mtime == (project / "MEMORY.md").stat().st_mtime


def test_every_skip_reason(tmp_path: Path) -> None:
    project = tmp_path / "p"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("outside\n")
    memory = project / "memory"
    for name in (".git", "node_modules", ".venv"):
        (memory / name).mkdir(parents=True)
        (memory / name / "x.md").write_text("x\n")
    (memory / "big.md").write_text("x" * 2000)
    (memory / "escape.md").symlink_to(outside / "secret.md")
    (memory / "escape_dir").symlink_to(outside)
    (memory / "inside.md").symlink_to(memory / "big.md")
    (memory / "fifo.md").parent.mkdir(exist_ok=True)
    os.mkfifo(memory / "fifo.md")
    (memory / "ok.md").write_text("fine\n")

    found = discover(memory_root=project, sessions_root=project / "sessions", max_bytes=1024)

    reasons = {Path(s.path).name: s.reason for s in found.skipped}
    assert reasons == {
        ".git": "excluded directory .git",
        "node_modules": "excluded directory node_modules",
        ".venv": "excluded directory .venv",
        "big.md": "over the size cap (2000 > 1024 bytes)",
        "inside.md": "over the size cap (2000 > 1024 bytes)",
        "escape.md": "symlink escapes the root",
        "escape_dir": "symlink escapes the root",
        "fifo.md": "not a regular file",
    }
    assert [Path(f.path).name for f in found.files] == ["ok.md"]


def test_missing_folders_give_no_files_and_no_roots(tmp_path: Path) -> None:
    found = discover(memory_root=tmp_path / "a", sessions_root=tmp_path / "b", max_bytes=100)
    assert (found.files, found.skipped, found.roots) == ([], [], {})
