"""One side of a benchmark that compares checkouts: its measurement, in a process of its own.

A benchmark run `--against` another tree measures each side in a fresh process of this
interpreter, started in that tree with `--measure <tree>`, so that `app` is imported from there
(the current directory comes first on `sys.path`) and no side inherits the other's caches. The
process prints its figures as JSON on its last line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def measure_in(script: str, tree: Path, *arguments: str) -> Any:
    """Run the benchmark `script` (its `__file__`) with `--measure tree` and `arguments`, in
    `tree`; what it printed last, read as JSON."""
    done = subprocess.run(
        [sys.executable, str(Path(script).resolve()), "--measure", str(tree), *arguments],
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def alternated(trees: dict[str, Path], rounds: int) -> Iterator[tuple[int, str, Path]]:
    """(round, name, tree) in the order the sides take turns: a process each, round by round,
    in reversed order every other round, so that neither is always first."""
    order = list(trees.items())
    for index in range(rounds):
        for name, tree in order if index % 2 == 0 else order[::-1]:
            yield index, name, tree
