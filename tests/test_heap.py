"""Freezing what a long-running process built out of the garbage collector's walks."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from app import heap


@pytest.fixture
def unfrozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process that has frozen nothing yet, left so (the test process's heap is not frozen
    for good by a test)."""
    monkeypatch.setattr(heap, "_late_loads_frozen", set())
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _still_collected(objects: list[Any]) -> int:
    collected = {id(item) for item in gc.get_objects()}
    return sum(id(item) in collected for item in objects)


@pytest.mark.usefixtures("unfrozen")
def test_freeze_heap_moves_what_is_alive_out_of_collections() -> None:
    # Lists: the collector tracks them (not a dict of atoms, which it leaves untracked).
    built = [["built", n] for n in range(1000)]

    heap.freeze_heap()

    assert gc.get_freeze_count() > 10_000
    assert _still_collected(built) == 0


@pytest.mark.usefixtures("unfrozen")
def test_a_late_load_is_frozen_once_and_only_in_a_frozen_process() -> None:
    heap.freeze_heap()  # as `agmem serve` does after its startup
    first = [["first", n] for n in range(1000)]
    heap.freeze_late_load("sdk")
    again = [["again", n] for n in range(1000)]
    heap.freeze_late_load("sdk")  # the load is once per process: so is its freeze
    again_collected = _still_collected(again)
    heap.freeze_late_load("another")

    assert _still_collected(first) == 0
    assert again_collected == len(again)
    assert _still_collected(again) == 0  # frozen with another load's


@pytest.mark.usefixtures("unfrozen")
def test_a_late_load_freezes_nothing_in_a_process_that_never_froze() -> None:
    # The tests' apps, a one-shot command: nothing of theirs is kept out of the collections.
    loaded = [["loaded", n] for n in range(1000)]

    heap.freeze_late_load("sdk")

    assert gc.get_freeze_count() == 0
    assert _still_collected(loaded) == len(loaded)
