"""Freezing what a long-running process built out of the garbage collector's walks.

A full (generation 2) collection walks every tracked object. Measured under the capture
benchmark, `agmem serve` walked the ~250,000 objects of the imported libraries and the app in
160-220 ms, during which every request waited, every ~10 s at 16 connections; with them frozen a
full collection took 4-15 ms (docs/capture.md, "Garbage collection"). `agmem sync` walked the
~130,000 objects of the libraries and the model, 80-160 ms inside whichever sync it hit.
"""

from __future__ import annotations

import gc

# What `freeze_late_load` has frozen in this process, by name.
_late_loads_frozen: set[str] = set()


def freeze_heap() -> None:
    """Exclude every object alive now from later collections; garbage is collected first so
    that none is kept for good."""
    gc.collect()
    gc.freeze()


def freeze_late_load(name: str) -> None:
    """In a process that froze its heap (`freeze_heap`), freeze again what a load after that
    (`name`: a library imported by a first request) added; nothing in a process that never
    froze (the tests', a one-shot command's).

    Once per name per process, as the load is: anything alive then is frozen for good, and
    besides the load that is the requests in flight, a few objects each, which this one-off
    freeze keeps whatever becomes of them."""
    if name in _late_loads_frozen or not gc.get_freeze_count():
        return
    _late_loads_frozen.add(name)
    freeze_heap()
