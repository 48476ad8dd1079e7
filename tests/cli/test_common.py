"""What every command shares: project paths as the service stores them."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import cast

import pytest

from app.cli.common import absolute_project, hand_over_signals, stop_on_signals
from app.entry import Terminated, signal_while_exiting


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


@pytest.mark.parametrize(
    ("signum", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)]
)
def test_a_second_signal_ends_a_long_running_command_at_once(
    signum: int, raised: type[KeyboardInterrupt]
) -> None:
    # `worker` and `sync --watch`: the first Ctrl-C or SIGTERM stops them normally, and what is
    # under way finishes (a sync's HNSW build, shielded from the cancel). A second did nothing.
    async def command() -> None:
        stop = asyncio.Event()
        with stop_on_signals(stop):
            os.kill(os.getpid(), signum)
            await asyncio.wait_for(stop.wait(), 30)
            os.kill(os.getpid(), signum)
            await asyncio.shield(asyncio.Event().wait())  # a cleanup that never ends by itself

    before = {handled: signal.getsignal(handled) for handled in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(KeyboardInterrupt) as ended:
            asyncio.run(command())
    finally:
        for handled, handler in before.items():
            signal.signal(handled, handler)
    assert type(ended.value) is raised


class _LoopWithoutAsyncioInternals:
    """A loop whose signal handlers live elsewhere (uvloop, a later asyncio)."""

    def __init__(self) -> None:
        self.removed: list[int] = []

    def remove_signal_handler(self, signum: int) -> bool:
        self.removed.append(signum)
        signal.signal(signum, signal.SIG_DFL)  # what asyncio's public removal does
        return True


def test_the_hand_over_works_on_a_loop_without_asyncios_handler_table() -> None:
    # It read asyncio's private `_signal_handlers`: on another loop that was an AttributeError in
    # the command's `finally`, a traceback where the exit should be.
    loop = _LoopWithoutAsyncioInternals()
    before = {handled: signal.getsignal(handled) for handled in (signal.SIGINT, signal.SIGTERM)}
    try:
        hand_over_signals(cast(asyncio.AbstractEventLoop, loop))

        assert loop.removed == [signal.SIGINT, signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is signal_while_exiting
        assert signal.getsignal(signal.SIGTERM) is signal_while_exiting
    finally:
        for handled, handler in before.items():
            signal.signal(handled, handler)
