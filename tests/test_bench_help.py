"""Every benchmark answers `--help`: it is how a newcomer finds a benchmark's options."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
MODULES = sorted(
    path.stem
    for path in BENCH.glob("*.py")
    if not path.stem.startswith("_") and "__main__" in path.read_text(encoding="utf-8")
)


@pytest.mark.parametrize("module", MODULES)
def test_a_benchmark_prints_its_help(
    module: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", [f"bench.{module}", "--help"])
    # Run as __main__ afresh, as `python -m` does, even if another test imported it.
    monkeypatch.delitem(sys.modules, f"bench.{module}", raising=False)

    with pytest.raises(SystemExit) as exited:
        runpy.run_module(f"bench.{module}", run_name="__main__")

    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")
