"""Wildcard patterns become LIKE expressions with every metacharacter escaped."""

from __future__ import annotations

import pytest

from app.memories.patterns import is_pattern, pattern_to_like


@pytest.mark.parametrize(
    ("pattern", "like"),
    [
        ("project.*", "project.%"),
        ("*.todos", "%.todos"),
        ("a**b", "a%b"),
        ("100%_done.*", r"100\%\_done.%"),
        ("back\\slash*", "back\\\\slash%"),
        ("[x](y).*", "[x](y).%"),
    ],
)
def test_pattern_to_like_escapes_metacharacters(pattern: str, like: str) -> None:
    assert pattern_to_like(pattern) == like


def test_is_pattern_only_for_stars() -> None:
    assert is_pattern("project.*")
    assert not is_pattern("project.[a-z]+")
