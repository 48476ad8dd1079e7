from __future__ import annotations

import errno
import os
from pathlib import Path

from app.sync.discover import discover, discover_changed, needs_whole_listing, scope_of


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


def test_missing_folders_give_no_files(tmp_path: Path) -> None:
    found = discover(memory_root=tmp_path / "a", sessions_root=tmp_path / "b", max_bytes=100)
    assert (found.files, found.skipped) == ([], [])


def _tree(tmp_path: Path) -> Path:
    """A project with every kind of entry `discover` looks at or passes over."""
    project = tmp_path / "p"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("outside\n")
    memory = project / "memory"
    (memory / "deep" / "er").mkdir(parents=True)
    (memory / "deep" / ".git").mkdir()
    (memory / "deep" / ".git" / "x.md").write_text("x\n")
    (memory / "node_modules").mkdir()
    (memory / "node_modules" / "y.md").write_text("y\n")
    (memory / "deep" / "er" / "b.md").write_text("b\n")
    (memory / "deep" / "c.md").write_text("c\n")
    (memory / "deep" / "c.txt").write_text("not markdown\n")
    (memory / "big.md").write_text("x" * 2000)
    (memory / "escape.md").symlink_to(outside / "secret.md")
    (memory / "escape_dir").symlink_to(outside)
    (memory / "linked_dir").symlink_to(memory / "deep")
    (memory / "inside.md").symlink_to(memory / "deep" / "c.md")
    os.mkfifo(memory / "fifo.md")
    (memory / "ok.md").write_text("fine\n")
    (project / "MEMORY.md").write_text("# m\n")
    (project / "notes.md").write_text("not memory\n")
    (project / "sessions" / "sub").mkdir(parents=True)
    (project / "sessions" / "s.jsonl").write_text("{}\n")
    (project / "sessions" / "sub" / "legacy.json").write_text("{}\n")
    (project / "sessions" / "sub" / "notes.md").write_text("not a transcript\n")
    return project


def _under_scope(path: str, scope: list[str]) -> bool:
    return any(path == p or path.startswith(p + os.sep) for p in scope)


def test_changed_paths_find_what_the_whole_listing_finds_under_them(tmp_path: Path) -> None:
    project = _tree(tmp_path)
    roots = {"memory_root": project, "sessions_root": project / "sessions"}
    whole = discover(**roots, max_bytes=1024)
    memory, sessions = project / "memory", project / "sessions"
    gone = memory / "deep" / "gone.md"
    every_path = [
        memory / "deep",
        memory / "deep" / "er",
        memory / "deep" / "er" / "b.md",
        memory / "deep" / "c.md",
        memory / "deep" / "c.txt",
        memory / "deep" / ".git",
        memory / "deep" / ".git" / "x.md",
        memory / "node_modules" / "y.md",
        memory / "big.md",
        memory / "escape.md",
        memory / "escape_dir",
        memory / "escape_dir" / "secret.md",
        memory / "linked_dir",
        memory / "linked_dir" / "er",
        memory / "linked_dir" / "c.md",
        memory / "inside.md",
        memory / "fifo.md",
        memory / "ok.md",
        gone,
        project / "MEMORY.md",
        project / "memory.md",
        project / "notes.md",
        sessions / "sub",
        sessions / "s.jsonl",
        sessions / "sub" / "notes.md",
    ]
    for n in range(len(every_path)):
        # Each path alone, and with its neighbours (a folder together with a file under it).
        for changed in ([every_path[n]], every_path[n : n + 3]):
            assert not needs_whole_listing(project, sessions, map(str, changed))
            scope = scope_of(map(str, changed), project)
            found = discover_changed(**roots, scope=scope, max_bytes=1024)

            assert sorted(found.files) == sorted(
                f for f in whole.files if _under_scope(f.path, scope.paths)
            )
            assert sorted(s.path for s in found.skipped) == sorted(
                s.path for s in whole.skipped if _under_scope(s.path, scope.paths)
            )


def test_a_root_folder_or_above_needs_the_whole_listing(tmp_path: Path) -> None:
    project = _tree(tmp_path)
    sessions = project / "sessions"
    for path in (project, project / "memory", sessions, tmp_path):
        assert needs_whole_listing(project, sessions, [str(path)])
    assert not needs_whole_listing(project, sessions, [str(project / "memory" / "ok.md")])


def test_a_changed_root_memory_file_brings_its_other_spelling(tmp_path: Path) -> None:
    project = _tree(tmp_path)
    scope = scope_of([str(project / "memory.md")], project)
    assert scope.paths == [str(project / "MEMORY.md"), str(project / "memory.md")]
    found = discover_changed(
        memory_root=project, sessions_root=project / "sessions", scope=scope, max_bytes=1024
    )
    assert [f.path for f in found.files] == [str(project / "MEMORY.md")]


def test_a_folder_and_a_file_under_it_are_one_scope_whatever_sorts_between_them(
    tmp_path: Path,
) -> None:
    # "deep.md" sorts between "deep" and "deep/c.md" as strings: the file under the folder was
    # kept as a path of its own, and found twice (the folder's walk, and its own stat).
    project = _tree(tmp_path)
    memory = project / "memory"
    (memory / "deep.md").write_text("beside the folder\n")
    changed = [str(memory / "deep"), str(memory / "deep.md"), str(memory / "deep" / "c.md")]

    scope = scope_of(changed, project)
    found = discover_changed(
        memory_root=project, sessions_root=project / "sessions", scope=scope, max_bytes=1024
    )

    assert scope.paths == [str(memory / "deep"), str(memory / "deep.md")]
    assert sorted(Path(f.path).relative_to(memory).as_posix() for f in found.files) == [
        "deep.md",
        "deep/c.md",
        "deep/er/b.md",
    ]


def test_a_symlink_loop_is_unreadable_not_an_escape(tmp_path: Path) -> None:
    # Links that resolve to each other point inside the root; the skip said they escaped it.
    memory = tmp_path / "p" / "memory"
    memory.mkdir(parents=True)
    (memory / "loop1.md").symlink_to("loop2.md")
    (memory / "loop2.md").symlink_to("loop1.md")
    (memory / "self.md").symlink_to("self.md")
    (memory / "dangling.md").symlink_to("gone.md")

    found = discover(memory_root=tmp_path / "p", sessions_root=tmp_path / "s", max_bytes=1024)

    loop = f"unreadable: {os.strerror(errno.ELOOP)}"
    assert {Path(s.path).name: s.reason for s in found.skipped} == {
        "loop1.md": loop,
        "loop2.md": loop,
        "self.md": loop,
        "dangling.md": f"unreadable: {os.strerror(errno.ENOENT)}",
    }
    assert found.files == []
