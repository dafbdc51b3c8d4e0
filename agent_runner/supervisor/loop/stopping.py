"""Stop requests: signals, `agent-runner stop` and the stop file, behind one wake-up descriptor.

Signal handlers only set a flag; Python's wakeup fd makes every wait in the loop return at
once, so a stop during a delay, a back-off or a round takes effect without polling.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Literal

from agent_runner.events import Emit

# SIGUSR1 is what `agent-runner stop --after-round` sends.
AFTER_ROUND_SIGNAL = signal.SIGUSR1
# `agent-runner stop` leaves this in log_dir just before it signals, so that serve can tell
# its SIGTERM from systemd's (the signal itself carries no sender Python can read).
REQUEST_FILE = "stop-request"
REQUEST_FRESH_S = 30.0
# Signals wake every wait at once; only the stop file is looked for, this often. Each look
# costs a wakeup, and a supervisor must cost next to nothing while an agent works for hours.
STOP_FILE_CHECK_S = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)

Mode = Literal["terminate", "finish_round"]


class StopControl:
    """Owns SIGTERM/SIGINT/SIGUSR1 handling and the wake-up pipe for one serve."""

    def __init__(
        self, default_mode: Mode, stop_file: Path, emit: Emit, request_file: Path | None = None
    ) -> None:
        self.default_mode: Mode = default_mode
        self.stop_file = stop_file
        self.emit = emit
        self.request_file = request_file
        self.mode: Mode | None = None
        self.source = ""
        self.announced = False
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}
        self._previous_wakeup = -1
        self._previous_mask: set[int | signal.Signals] = set()

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
        # Inherited blocked, these could never stop us (and agents would inherit the mask);
        # one already pending is handled here, as a stop.
        self._previous_mask = signal.pthread_sigmask(
            signal.SIG_UNBLOCK, (*STOP_SIGNALS, AFTER_ROUND_SIGNAL)
        )

    def uninstall(self) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self._previous_mask)
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

    def interrupt(self, source: str) -> None:
        """Request a terminate stop from inside serve, waking every wait at once."""
        self.request("terminate", source)
        with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending anyway
            os.write(self._write_fd, b"\0")

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == AFTER_ROUND_SIGNAL:
            self.request("finish_round", "stop --after-round")
            self._take_request_file()
            return
        source = "stop" if self._take_request_file() else signal.Signals(signum).name
        if self.mode is not None:
            # A second stop signal while finishing a round means "now".
            self.request("terminate", source)
        else:
            self.request(self.default_mode, source)

    def _take_request_file(self) -> bool:
        """Whether `agent-runner stop` asked just now; the file is consumed either way."""
        if self.request_file is None:
            return False
        try:
            age = time.time() - os.stat(self.request_file, follow_symlinks=False).st_mtime
            os.unlink(self.request_file)
        except OSError:
            return False
        return age <= REQUEST_FRESH_S

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
