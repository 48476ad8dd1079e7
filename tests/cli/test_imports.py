"""Every `agmem` command is a fresh process: defining the commands must stay cheap to import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import app.cli
from app.cli import memory
from app.memories import service

# What only some commands need; each costs a fraction of a second to seconds on import.
HEAVY = (
    "alembic",
    "fastapi",
    "google.genai",
    "langchain_text_splitters",
    "mcp",
    "numpy",
    "rich.progress",
    "uvicorn",
    "wordllama",
)


def test_the_command_line_imports_no_command_implementation() -> None:
    probe = f"import sys, app.cli; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )

    assert done.stdout.split() == []


def test_memory_list_limit_matches_the_service() -> None:
    assert memory.MAX_LIST_LIMIT == service.MAX_LIST_LIMIT


def test_the_command_line_uses_only_typers_public_api() -> None:
    # typer vendors click as `typer._click`, free to change in any release.
    private = []
    for module in Path(app.cli.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            private += [f"{module.name}: {n}" for n in names if n.startswith("typer._")]

    assert private == []
