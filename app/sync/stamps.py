"""When a file's stored (size, mtime) can be trusted to mean "unchanged": git's racy-git rule.

A file that changes after the sync read it, within the same tick of the clock that stamps
mtimes and to the same size, has the (size, mtime) the sync stored: every later sync took it
for unchanged, and the index kept the old text. A file read within a tick of its mtime is
stored with a size no file has, so the next sync reads it again (git smudges such an entry of
its index the same way).
"""

from __future__ import annotations

import sys
import time

# Linux stamps mtimes from its coarse clock (CLOCK_REALTIME_COARSE, unnamed in Python): the time
# at its last tick (1-10 ms), so a file stamped at or after that clock's reading may change again
# within the tick and keep its mtime (the margin: float rounding). Elsewhere the time, against
# twice a 10 ms tick.
if sys.platform == "linux":
    _CLOCK_REALTIME_COARSE = 5

    def stamp_clock() -> float:
        """Now, as the kernel would stamp a file written now."""
        return time.clock_gettime(_CLOCK_REALTIME_COARSE)

    TICK_SECONDS = 1e-6
else:
    stamp_clock = time.time
    TICK_SECONDS = 0.02
# Mtimes of whole seconds are a file system that keeps no fraction: 1 s (HFS+, ext3, some NFS
# servers) or 2 s (FAT).
WHOLE_SECONDS_TICK = 2.0
RACY_SIZE = -1


def racy(mtime: float, read_at: float) -> bool:
    """Whether a file read at `read_at` (on `stamp_clock`) could change after the read and
    keep this mtime."""
    tick = WHOLE_SECONDS_TICK if mtime.is_integer() else TICK_SECONDS
    return mtime > read_at - tick
