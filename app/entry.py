"""The `agmem` executable: signals are handled before the command line's imports start.

This module imports nothing of the app, so Ctrl-C during the half second of imports that follows
is one line and exit 130 like Ctrl-C at any other moment, not a traceback of the import machinery.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import NoReturn


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `timeout`, systemd, an MCP client closing its server), raised as Ctrl-C's
    KeyboardInterrupt so that a command unwinds the same way: its `finally` blocks run (a sync's
    dropped HNSW index is rebuilt) and so do its exit handlers (the embedded PostgreSQL this
    process started is stopped). With SIGTERM's default action the process died at once, and
    the embedded server kept running until the next agmem command found it orphaned."""


def raise_terminated(_signum: int, _frame: FrameType | None) -> NoReturn:
    raise Terminated


def interrupted(interrupt: KeyboardInterrupt) -> int:
    """Say in one line that a signal ended the command; return the exit code a shell gives a
    process that signal killed (128 + its number), so a script can tell it from an error."""
    signalled()
    terminated = isinstance(interrupt, Terminated)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write("agmem: terminated\n" if terminated else "agmem: interrupted\n")
        sys.stderr.flush()
    return 128 + (signal.SIGTERM if terminated else signal.SIGINT)


def undecodable_argument(argv: list[str]) -> str | None:
    """The first argument the locale's encoding could not decode, as its bytes, else None.

    Python decodes arguments with the locale's encoding, keeping undecodable bytes as lone
    surrogates. In an ASCII locale (LC_ALL=C with UTF-8 mode turned off) `agmem memory set k 中文`
    stored six U+FFFD (the surrogates cleaned before storage), a search for it found nothing, and
    `agmem sync -p <a CJK folder>` was a UnicodeEncodeError traceback.
    """
    for argument in argv:
        try:
            argument.encode("utf-8")
        except UnicodeEncodeError:
            return repr(os.fsencode(argument))
    return None


def main() -> None:
    signal.signal(signal.SIGTERM, raise_terminated)
    if sys.unraisablehook is not signal_not_swallowed:  # main run twice: not its own previous
        _Unraisable.previous = sys.unraisablehook
        sys.unraisablehook = signal_not_swallowed
    # Registered first, so run last: after every other exit handler (the embedded server's stop).
    atexit.register(ignore_signals_in_teardown)
    undecodable = undecodable_argument(sys.argv[1:])
    if undecodable is not None:
        sys.stderr.write(
            f"agmem: error: the argument {undecodable} is not text in this locale's encoding "
            f"({sys.getfilesystemencoding()}); run agmem in a UTF-8 locale (LANG=C.UTF-8) or "
            "with PYTHONUTF8=1\n"
        )
        sys.exit(2)
    try:
        from app.cli import cli
    except KeyboardInterrupt as interrupt:
        sys.exit(interrupted(interrupt))
    try:
        cli()
    except KeyboardInterrupt as interrupt:
        # One that came before the command line handles them: as typer builds the click command
        # (~0.1 s of signatures and type hints), where it escaped with a traceback, exit 1 / -2.
        code = interrupted(interrupt)
    else:
        return
    finally:
        # The command is over; the exit handlers left stop the embedded server this process
        # started (`pg_ctl stop`, about a second; up to pg_ctl's 60 s when the server is slow to
        # stop). Ctrl-C there was a traceback ("Exception ignored in atexit callback") and cut
        # the stop short: now the first signal lets it finish, and a second stops it at once.
        signal.signal(signal.SIGINT, signal_while_exiting)
        signal.signal(signal.SIGTERM, signal_while_exiting)
    sys.exit(code)


def ignore_signals_in_teardown() -> None:
    """Ignore Ctrl-C and SIGTERM from the last exit handler on: nothing is left to stop, and the
    process ends with its own exit code. After the exit handlers, Python puts every signal whose
    handler is a function back to its default action while it tears the modules down (~0.4 s
    for the worker): a second signal there killed the process by that signal (`agmem worker`,
    -15 / -2, 8 of 8 times 0.15-0.4 s after the first). An ignored one stays ignored.

    The unraisable hook goes back too: no signal is left to re-raise, and the teardown clears
    this module's globals, after which the hook failed ("Exception ignored in
    sys.unraisablehook", an AttributeError) in place of the finalizer's own exception."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.unraisablehook is signal_not_swallowed:
        sys.unraisablehook = _Unraisable.previous


class _Unraisable:
    previous = sys.__unraisablehook__  # the hook `signal_not_swallowed` leaves the rest to
    main_thread = threading.main_thread().ident


# Blocked while a swallowed signal waits to be raised again: one more landing in the hook failed
# it ("Exception ignored in sys.unraisablehook") and both were lost, the command going on.
_ENDING_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def signal_not_swallowed(unraisable: sys.UnraisableHookArgs) -> None:
    """`sys.unraisablehook`: a signal's exception (Ctrl-C's KeyboardInterrupt, SIGTERM's
    `Terminated`) that Python swallowed is raised again once the code it landed in has returned.

    Python runs a signal's handler in the main thread wherever that thread is, and an exception
    raised in a finalizer (a weakref callback, `__del__`, a garbage collector's callback, an exit
    handler) cannot propagate: Python printed "Exception ignored in: <function _ModuleLock...
    cb>" and its traceback, and the command went on as if no signal had come (`agmem mcp`, as
    it started to read its input: the landing CI of round 20, 1 of ~2,170 tests; it then ran
    until its client closed the pipe, or for the 20 s exit deadline). No signal handler can tell
    it is in a finalizer, so the swallowing is caught here, the last thing Python does with it.
    A KeyboardInterrupt that code in a finalizer raised itself is taken for Ctrl-C too.

    Raised again as the signal raised again (`signal.raise_signal`), so that the handler now in
    place decides, from the next profiling event outside this hook: the main thread's return
    to the code the finalizer interrupted, or its next call. If that is another finalizer (the
    next callback of the same object, the garbage collector's next), it is swallowed there and
    comes back here: those finalizers are cut short, as the signal landing in them would have,
    and the signal is not delayed until an end nothing can tell. Until then Ctrl-C and SIGTERM
    are blocked, from the hook's first call after those checks (the few bytecodes before it
    cannot be covered from Python): one landing meanwhile is delivered with the re-raised one,
    and its handler decides too.

    The one-shot profile function needs the thread's profiler to be none: an exception raised
    out of a profile function removes the profile function, and a profiler in place (cProfile's
    `Profile`, which `sys.getprofile` returns but `sys.setprofile` cannot put back) would be
    gone. Under a profiler the signal is left as Python leaves it: printed, and lost (one
    swallowed while another waits to be raised again finds that one's profile function: the
    waiting one is raised)."""
    exc_type = unraisable.exc_type
    if not (
        isinstance(exc_type, type)
        and issubclass(exc_type, KeyboardInterrupt)
        and threading.get_ident() == _Unraisable.main_thread  # C, not current_thread's Python
    ):
        _Unraisable.previous(unraisable)
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _ENDING_SIGNALS)
    if sys.getprofile() is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        _Unraisable.previous(unraisable)
        return
    signum = signal.SIGTERM if issubclass(exc_type, Terminated) else signal.SIGINT
    here = signal_not_swallowed.__code__

    def raise_again(frame: FrameType, _event: str, _arg: object) -> None:
        if frame.f_code is here:  # this hook, returning to the finalizer's caller
            return
        sys.setprofile(None)
        # Pending until the mask is back, with any that landed since; then their handlers run,
        # and an exception one raises, out of a profile function, propagates from the profiled
        # code's frame (and removes the profile function, none already).
        signal.raise_signal(signum)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    sys.setprofile(raise_again)


class _Signals:
    seen = 0  # Ctrl-C and SIGTERM this process has received


def signalled() -> None:
    """Count a Ctrl-C or SIGTERM that a command handled itself (its normal stop, or its end as
    an interrupted command): one more once the command is over is a second signal."""
    _Signals.seen += 1


def signal_while_exiting(signum: int, _frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM once the command is over. The first is let pass: the embedded server's
    normal stop (its shutdown checkpoint) finishes. A second, counting one that stopped the
    command (Ctrl-C twice is twice), stops the server at once unless another agmem process still
    uses it (Postgres's immediate shutdown: crash-safe, the next start replays the WAL) and
    exits at once, 130 / 143. It was ignored too: a stop that hung (pg_ctl waits 60 s) left the
    user, or a supervisor's repeated SIGTERM, nothing but SIGKILL, which left the server running.
    """
    # Looked up, not imported: a process that never opened the embedded server has none.
    embedded = sys.modules.get("app.db.embedded")
    signalled()
    if _Signals.seen == 1:
        if embedded is not None and embedded.exit_stops_server():
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(
                    "agmem: stopping the embedded PostgreSQL; interrupt again to stop it at once\n"
                )
                sys.stderr.flush()
        return
    end_at_once(signum)


def end_at_once(signum: int) -> NoReturn:
    """End this process now, as interrupted by `signum`: the embedded server it holds stopped at
    once unless another agmem process uses it (`stop_at_once`), exit 130 / 143."""
    embedded = sys.modules.get("app.db.embedded")
    if embedded is not None:
        embedded.stop_at_once()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    code = interrupted(Terminated() if signum == signal.SIGTERM else KeyboardInterrupt())
    os._exit(code)


# How long a process its client stopped may take to end before it ends as after a second signal.
EXIT_DEADLINE_SECONDS = 20.0


def end_by_deadline(signum: int) -> None:
    """Arm a deadline after the signal that asked this process to end: if it has not ended
    EXIT_DEADLINE_SECONDS later, `end_at_once`. For `agmem mcp`, whose client sends SIGTERM and
    waits: cancelling tool calls in flight was seen to spin in the MCP SDK's and anyio's
    cancellation at full CPU, or to wait in the interpreter's exit for a thread that never
    ended, the embedded PostgreSQL running, until SIGKILL (2 of 15 SIGTERMs during a flood of
    calls, before and after the round that found it). A daemon thread: it dies with a process
    that ends in time; one still stopping the server by then is stopped at once."""

    def expire() -> None:
        time.sleep(EXIT_DEADLINE_SECONDS)
        end_at_once(signum)

    threading.Thread(target=expire, name="agmem-exit-deadline", daemon=True).start()


def raise_terminated_by_deadline(signum: int, frame: FrameType | None) -> NoReturn:
    """`raise_terminated` with `end_by_deadline` armed, once."""
    signal.signal(signal.SIGTERM, raise_terminated)
    end_by_deadline(signum)
    raise_terminated(signum, frame)
