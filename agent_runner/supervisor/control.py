"""`agent-runner stop`: signal the serve named by serve.pid and wait for it to exit."""

from __future__ import annotations

import os
import select
import signal
import time

from agent_runner.config import Config
from agent_runner.errors import AgentRunnerError
from agent_runner.supervisor.instance import read_holder
from agent_runner.supervisor.stopping import AFTER_ROUND_SIGNAL


def request_stop(config: Config, *, after_round: bool, timeout_s: float) -> str:
    """Ask serve to stop; return a one-line report or raise when it does not stop in time."""
    holder = read_holder(config.runtime.log_dir)
    if holder is None:
        raise AgentRunnerError(f"no serve is running for {config.runtime.work_dir}")
    # read_holder verified the pid's start time, so this cannot hit a recycled pid.
    try:
        pidfd = os.pidfd_open(holder.pid)
    except ProcessLookupError:
        return f"serve (pid {holder.pid}) had already stopped"
    try:
        started = time.monotonic()
        signal.pidfd_send_signal(pidfd, AFTER_ROUND_SIGNAL if after_round else signal.SIGTERM)
        readable, _, _ = select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)
    if not readable:
        raise AgentRunnerError(f"serve (pid {holder.pid}) still running after {timeout_s:g}s")
    return f"serve (pid {holder.pid}) stopped after {time.monotonic() - started:.1f}s"
