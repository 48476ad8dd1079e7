"""What every command shares: project paths as the service stores them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.cli.common import absolute_project


def test_a_project_path_is_absolute_with_home_and_dot_dot_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert absolute_project(".") == str(tmp_path)
    assert absolute_project("work/../shop/") == str(tmp_path / "shop")
    assert absolute_project(Path("shop")) == str(tmp_path / "shop")
    assert absolute_project("~/shop") == str(tmp_path / "home" / "shop")
    assert absolute_project("/srv/shop") == os.path.normpath("/srv/shop")
