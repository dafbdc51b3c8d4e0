"""`agent-runner stop`: signal the serve named by serve.pid and wait for it to exit or agree."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent_runner.config import Config
from agent_runner.supervisor.boot.instance import open_holder
from agent_runner.supervisor.loop.state import read_state
from agent_runner.supervisor.loop.stopping import AFTER_ROUND_SIGNAL, REQUEST_FILE

ACK_POLL_S = 0.05


@dataclass(frozen=True)
class StopOutcome:
    """What came of a stop request; `timeout` is the only failure."""

    outcome: Literal["stopped", "pending", "not_running", "timeout"]
    pid: int | None
    waited_s: float
    detail: str


def request_stop(config: Config, *, after_round: bool, timeout_s: float) -> StopOutcome:
    """Ask serve to stop; wait until it exits, agrees to stop after its round, or the timeout."""
    log_dir = config.runtime.log_dir
    opened = open_holder(log_dir)
    if opened is None:
        return StopOutcome(
            "not_running", None, 0.0, f"no serve is running for {config.runtime.work_dir}"
        )
    holder, pidfd = opened
    started = time.monotonic()
    try:
        if not after_round:
            _leave_request(log_dir)
        signal.pidfd_send_signal(pidfd, AFTER_ROUND_SIGNAL if after_round else signal.SIGTERM)
        deadline = started + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            readable, _, _ = select.select([pidfd], [], [], max(0.0, min(remaining, ACK_POLL_S)))
            waited = round(time.monotonic() - started, 3)
            if readable:
                return StopOutcome(
                    "stopped",
                    holder.pid,
                    waited,
                    f"serve (pid {holder.pid}) stopped after {waited:.1f}s",
                )
            pending = _pending_stop(log_dir)
            if after_round and pending is not None:
                return StopOutcome(
                    "pending",
                    holder.pid,
                    waited,
                    f"serve (pid {holder.pid}) stops when {pending} (stop pending)",
                )
            if remaining <= 0:
                return StopOutcome(
                    "timeout",
                    holder.pid,
                    waited,
                    f"serve (pid {holder.pid}) still running after {timeout_s:g}s",
                )
    finally:
        os.close(pidfd)


def _leave_request(log_dir: Path) -> None:
    """Tell serve the SIGTERM that follows is ours, not systemd's (see stopping.py)."""
    path = log_dir / REQUEST_FILE
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    # Without it the stop still works; serve only names its source "SIGTERM".
    with contextlib.suppress(OSError):
        os.close(os.open(path, flags, 0o600))


def _pending_stop(log_dir: Path) -> str | None:
    """What serve waits for before it stops, once state.json shows it took the request."""
    state = read_state(log_dir)
    stop = state.get("stop")
    if not isinstance(stop, dict) or stop.get("mode") != "finish_round":
        return None
    current = state.get("round")
    number = current.get("number") if isinstance(current, dict) else None
    return f"round {number} ends" if isinstance(number, int) else "the current round ends"
