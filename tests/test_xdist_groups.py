"""`make test`'s `--dist loadgroup` keeps each xdist_group on one worker."""

from __future__ import annotations

import pytest


def test_the_grouped_tests_carry_their_group_to_the_scheduler(
    request: pytest.FixtureRequest,
) -> None:
    # pytest-xdist groups a test by adding `@<group>` to its node id, which pytest 9.2 no longer
    # lets a plugin change (pytest-dev/pytest-xdist#1386): each group was spread silently, and
    # each worker started the module-scoped `agmem serve` of tests/cli/test_serve.py and those of
    # tests/cli/test_serve_wire.py again (~5 s each). pyproject.toml keeps pytest below 9.2.
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("only a `--dist loadgroup` run sends groups to its workers")
    grouped = [i for i in request.session.items if i.get_closest_marker("xdist_group")]
    lost = [item.nodeid for item in grouped if "@" not in item.nodeid]
    assert not lost, f"{len(lost)} of {len(grouped)} grouped tests would be spread: {lost[:3]}"
