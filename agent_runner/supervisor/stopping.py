"""Stop requests: signals, `agent-runner stop` and the stop file, behind one wake-up descriptor.

Signal handlers only set a flag; Python's wakeup fd makes every wait in the loop return at
once, so a stop during a delay, a back-off or a round takes effect without polling.
"""

from __future__ import annotations

import os
import selectors
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Literal

from agent_runner.events import Emit

# SIGUSR1 is what `agent-runner stop --after-round` sends.
AFTER_ROUND_SIGNAL = signal.SIGUSR1
# Signals wake every wait at once; only the stop file is looked for, this often. Each look
# costs a wakeup, and a supervisor must cost next to nothing while an agent works for hours.
STOP_FILE_CHECK_S = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)

Mode = Literal["terminate", "finish_round"]


class StopControl:
    """Owns SIGTERM/SIGINT/SIGUSR1 handling and the wake-up pipe for one serve."""

    def __init__(self, default_mode: Mode, stop_file: Path, emit: Emit) -> None:
        self.default_mode: Mode = default_mode
        self.stop_file = stop_file
        self.emit = emit
        self.mode: Mode | None = None
        self.source = ""
        self.announced = False
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}
        self._previous_wakeup = -1

    @property
    def wake_fd(self) -> int:
        """Readable whenever a stop signal arrived since the last `drain()`."""
        return self._read_fd

    @property
    def requested(self) -> bool:
        return self.mode is not None

    def install(self) -> None:
        # SIGHUP is a closed terminal: stop cleanly rather than die with the agent still running.
        for signum in (*STOP_SIGNALS, AFTER_ROUND_SIGNAL):
            self._previous[signum] = signal.signal(signum, self._on_signal)
        self._previous_wakeup = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)

    def uninstall(self) -> None:
        signal.set_wakeup_fd(self._previous_wakeup)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        os.close(self._read_fd)
        os.close(self._write_fd)

    def request(self, mode: Mode, source: str) -> None:
        """Record a stop; a terminate request upgrades an earlier finish-round one."""
        if self.mode is None or mode == "terminate":
            if self.mode != mode:
                self.announced = False
            self.mode, self.source = mode, source

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == AFTER_ROUND_SIGNAL:
            self.request("finish_round", "stop --after-round")
        elif self.mode is not None:
            # A second stop signal while finishing a round means "now".
            self.request("terminate", signal.Signals(signum).name)
        else:
            self.request(self.default_mode, signal.Signals(signum).name)

    def check_stop_file(self) -> bool:
        """Request a stop if the stop file exists; True when it does."""
        if self.stop_file.exists():
            if self.mode is None:
                self.emit("stop_file_detected", path=str(self.stop_file))
            self.request(self.default_mode, "stop_file")
            return True
        return False

    def announce(self) -> None:
        """Emit stop_requested once per new request (never from inside a signal handler)."""
        if self.mode is not None and not self.announced:
            self.announced = True
            self.emit("stop_requested", source=self.source, mode=self.mode)

    def drain(self) -> None:
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            return

    def sleep(self, seconds: float, monotonic: Callable[[], float]) -> bool:
        """Sleep up to `seconds`; False as soon as a stop is requested (signal or stop file)."""
        deadline = monotonic() + seconds
        with selectors.DefaultSelector() as selector:
            selector.register(self._read_fd, selectors.EVENT_READ)
            while not self.requested:
                if self.check_stop_file():
                    break
                remaining = deadline - monotonic()
                if remaining <= 0:
                    return True
                if selector.select(min(remaining, STOP_FILE_CHECK_S)):
                    self.drain()
        return False
