"""The process that redacts the pass's huge rows (`app.redaction`), run as
`python -m app.redaction_worker`: a call a frame on stdin, its result a frame on stdout.

Not multiprocessing: its spawn re-imports the caller's `__main__`, so a script running a pass
without an `if __name__ == "__main__":` guard ran a second pass in the worker, which waited on the
first's row lock while the first waited on it, for ever; and its worker outlived a SIGKILLed
parent, blocked on its call queue (52 MB, and the resource tracker's 12 MB). This one ends at EOF
on stdin (its parent's end, however it came) and, on Linux, at its parent's death mid-row.

A frame is an 8-byte big-endian length and a pickle: a call `(function, args)`, an answer
`(True, result)` or `(False, exception)`. Only the parent writes to it; both ends are ours.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import struct
import sys
from typing import IO, Any

HEADER = struct.Struct(">Q")
_PR_SET_PDEATHSIG = 1


def frame(value: Any) -> bytes:
    data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def _read(stream: IO[bytes], size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def serve(calls: IO[bytes], answers: IO[bytes]) -> None:
    """Answer calls until EOF on `calls`."""
    while (header := _read(calls, HEADER.size)) is not None:
        payload = _read(calls, HEADER.unpack(header)[0])
        if payload is None:
            return
        function, args = pickle.loads(payload)
        try:
            answer = (True, function(*args))
        except Exception as error:  # given back: the parent raises it where the row was
            answer = (False, error)
        answers.write(frame(answer))
        answers.flush()


def _die_with_parent(parent: int) -> None:
    # Killed when the parent dies, even mid-row (EOF is read only between rows). Linux only;
    # elsewhere the row in hand is finished first.
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the prctl
        sys.exit(0)


def main() -> None:
    _die_with_parent(int(sys.argv[1]))
    # In the terminal's process group: a Ctrl-C is for the pass's owner, which stops this.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    # Whatever else prints goes to stderr, not into the answers.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
