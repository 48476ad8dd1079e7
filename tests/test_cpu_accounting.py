"""tests/cpu_accounting.py: a run's lines replace those of the last run into the same folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import cpu_accounting


class _Controller:
    """pytest's config as the xdist controller of a run sees it (it registers no plugin)."""

    def getoption(self, name: str, default: Any = None) -> Any:
        return 2 if name == "numprocesses" else default


def test_a_second_run_into_one_folder_starts_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = {"id": "tests/x.py::t", "worker": "gw0", "self": 1.0, "children": 0.0}
    for worker in ("gw0", "gw2", "main"):
        (tmp_path / f"{worker}.jsonl").write_text(
            json.dumps({**line, "processes": 0, "wall": 1.0, "end": 0.0}) + "\n"
        )
    monkeypatch.setenv("AGMEM_TEST_CPU_LOG", str(tmp_path))

    cpu_accounting.configure(_Controller())  # type: ignore[arg-type]
    cpu_accounting.summary(tmp_path)

    assert capsys.readouterr().out.startswith("0 tests: self 0.0 s")
